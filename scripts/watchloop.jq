# The raw material of the watch-loop diagnosis, extracted by hand the way
# the seed incident was found: every Services watch with the resourceVersion
# it asked to start from, and every Endpoints delete and create, one compact
# line each. scripts/bench-scan.sh times it against `auditlens scan`.
select(
  (.objectRef.resource == "services" and .verb == "watch")
  or (.objectRef.resource == "endpoints" and (.verb == "delete" or .verb == "create"))
)
| [
    .stageTimestamp, .verb, .objectRef.resource, .objectRef.namespace // "", .objectRef.name // "",
    .user.username, .userAgent // "",
    ((.requestURI | capture("[?&]resourceVersion=(?<rv>[^&]*)") | .rv) // "")
  ]
