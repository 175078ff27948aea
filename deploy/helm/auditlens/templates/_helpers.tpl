{{/* The name of every object: the release's, or release-auditlens. */}}
{{- define "auditlens.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "auditlens.labels" -}}
app.kubernetes.io/name: auditlens
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: auditlens
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* auditlens.selector: the labels a component's pods are found by. */}}
{{- define "auditlens.selector" -}}
app.kubernetes.io/name: auditlens
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "auditlens.image" -}}
{{- $tag := .Values.image.tag -}}
{{- if not $tag -}}{{- $tag = ternary "dev-embedded" "dev" (eq .Values.mode "embedded") -}}{{- end -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}

{{- define "auditlens.tlsSecret" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "auditlens.fullname" .)) -}}
{{- end -}}
{{- define "auditlens.webhookSecret" -}}
{{- .Values.webhook.existingSecret | default (printf "%s-webhook" (include "auditlens.fullname" .)) -}}
{{- end -}}
{{- define "auditlens.apiSecret" -}}
{{- .Values.api.existingSecret | default (printf "%s-api" (include "auditlens.fullname" .)) -}}
{{- end -}}
{{- define "auditlens.storeSecret" -}}
{{- .Values.store.existingSecret | default (printf "%s-store" (include "auditlens.fullname" .)) -}}
{{- end -}}

{{/* auditlens.checks stops a render whose values cannot work. */}}
{{- define "auditlens.checks" -}}
{{- if not (has .Values.mode (list "embedded" "scaled")) -}}
{{- fail (printf "mode is %q: embedded or scaled" .Values.mode) -}}
{{- end -}}
{{- if and (not .Values.tls.existingSecret) (or (not .Values.tls.cert) (not .Values.tls.key)) -}}
{{- fail "tls: set existingSecret, or cert and key (serve listens beyond loopback only over TLS here)" -}}
{{- end -}}
{{- if and (not .Values.webhook.existingSecret) (not .Values.webhook.token) -}}
{{- fail "webhook: set existingSecret or token (TOKEN=CLUSTER): without one, anyone who reaches the webhook writes events" -}}
{{- end -}}
{{- if and (not .Values.api.existingSecret) (not .Values.api.tokens) -}}
{{- fail "api: set existingSecret or tokens: serve refuses to serve the read API and UI beyond loopback without authentication" -}}
{{- end -}}
{{- if and (eq .Values.mode "scaled") (not .Values.store.existingSecret) (not .Values.store.url) -}}
{{- fail "mode scaled: set store.url or store.existingSecret (the clickhouse:// store URL)" -}}
{{- end -}}
{{- end -}}

{{/* auditlens.pod: the pod spec of a serve process; .component is
receiver or analyzer, .resources and .probes its own, .dataVolume the
volume of --data unless a claim template gives it, .spread to spread the
receivers over nodes. */}}
{{- define "auditlens.pod" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
serviceAccountName: {{ include "auditlens.fullname" $root }}
automountServiceAccountToken: false
# serve drains in order at SIGTERM: readiness fails, HTTP shutdown (15 s),
# then spooled events are stored for up to --drain-timeout (30 s).
terminationGracePeriodSeconds: 60
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .spread }}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "auditlens.selector" (dict "root" $root "component" "receiver") | nindent 6 }}
{{- end }}
containers:
- name: auditlens
  image: {{ include "auditlens.image" $root | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
  - serve
  - --listen=:8443
  - --data=/var/lib/auditlens
  {{- if eq $v.mode "scaled" }}
  - --store=$(AUDITLENS_STORE)
  {{- with $v.store.onCluster }}
  - --on-cluster={{ . }}
  {{- end }}
  {{- end }}
  - --tls-cert=/etc/auditlens/tls/tls.crt
  - --tls-key=/etc/auditlens/tls/tls.key
  - --api-token-file=/etc/auditlens/api/api-tokens
  - --webhook-token=$(AUDITLENS_WEBHOOK_TOKEN)
  {{- if eq .component "receiver" | and (eq $v.mode "scaled") }}
  # The analyzer runs the detectors and reports; receivers receive and
  # serve the read API.
  - --detect=false
  {{- else }}
  - --config=/etc/auditlens/reports/reports.yaml
  - --detect-interval={{ $v.detectInterval }}
  {{- end }}
  - --log-level={{ $v.logLevel }}
  {{- range $v.extraArgs }}
  - {{ . | quote }}
  {{- end }}
  env:
  {{- if eq $v.mode "scaled" }}
  - name: AUDITLENS_STORE
    valueFrom:
      secretKeyRef:
        name: {{ include "auditlens.storeSecret" $root }}
        key: store-url
  {{- end }}
  - name: AUDITLENS_WEBHOOK_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ include "auditlens.webhookSecret" $root }}
        key: webhook-token
  ports:
  - name: https
    containerPort: 8443
    protocol: TCP
  {{- with .probes.startup }}
  startupProbe:
    httpGet: {path: /healthz, port: https, scheme: HTTPS}
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .probes.readiness }}
  readinessProbe:
    httpGet: {path: /readyz, port: https, scheme: HTTPS}
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .probes.liveness }}
  livenessProbe:
    httpGet: {path: /healthz, port: https, scheme: HTTPS}
    {{- toYaml . | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml .resources | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
  volumeMounts:
  - name: data
    mountPath: /var/lib/auditlens
  - name: tmp
    mountPath: /tmp
  - name: tls
    mountPath: /etc/auditlens/tls
    readOnly: true
  - name: api-tokens
    mountPath: /etc/auditlens/api
    readOnly: true
  {{- if not (eq .component "receiver" | and (eq $v.mode "scaled")) }}
  - name: reports
    mountPath: /etc/auditlens/reports
    readOnly: true
  {{- end }}
volumes:
{{- with .dataVolume }}
- name: data
  {{- toYaml . | nindent 2 }}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
- name: tls
  secret:
    secretName: {{ include "auditlens.tlsSecret" $root }}
- name: api-tokens
  secret:
    secretName: {{ include "auditlens.apiSecret" $root }}
{{- if not (eq .component "receiver" | and (eq $v.mode "scaled")) }}
- name: reports
  configMap:
    name: {{ include "auditlens.fullname" $root }}-reports
{{- end }}
{{- end -}}
