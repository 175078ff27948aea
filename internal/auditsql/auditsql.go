// Package auditsql holds the SQL expressions over audit_events that the
// detectors and their evidence queries share, each written once: what
// a request's time is, so that every detector groups and orders requests
// the same way. internal/reflector builds the reads and relists on it,
// internal/heartbeat the heartbeats.
package auditsql

// RequestAt is when a request was received, a DateTime64(6): its
// requestReceivedTimestamp (received_at, which every stage of a request
// carries), or the stage's own time where the log has none (1.8's
// v1beta1, Cloud Logging entries; received_at is then 0) or holds a
// later one than the stage's (clocks that disagree). min() over a
// request's stages is its start.
const RequestAt = `if(received_at > toDateTime64(0, 6, 'UTC'), least(received_at, ts), ts)`

// RequestTime is RequestAt in microseconds since the epoch (an Int64).
const RequestTime = `toUnixTimestamp64Micro(` + RequestAt + `)`
