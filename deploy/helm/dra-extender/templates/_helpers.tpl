{{/* Labels every object of the chart carries, besides the ones the kustomize manifests set. */}}
{{- define "dra-extender.labels" -}}
app.kubernetes.io/part-of: dra-extender
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{- define "dra-extender.secondScheduler" -}}
{{- if eq .Values.mode "second-scheduler" }}true{{ end }}
{{- end }}

{{- define "dra-extender.replicas" -}}
{{- if not (kindIs "invalid" .Values.replicas) }}{{ .Values.replicas }}
{{- else }}2{{ end }}
{{- end }}

{{/* Combinations that cannot work refuse to render, naming what is wrong. */}}
{{- define "dra-extender.validate" -}}
{{- if not (has .Values.mode (list "second-scheduler" "scheduler-config")) }}
{{- fail (printf "mode must be second-scheduler or scheduler-config, got %q" .Values.mode) }}
{{- end }}
{{- if not (has .Values.certificates.source (list "cert-manager" "self-signed" "provided")) }}
{{- fail (printf "certificates.source must be cert-manager, self-signed or provided, got %q" .Values.certificates.source) }}
{{- end }}
{{- $replicas := include "dra-extender.replicas" . | int }}
{{- if lt $replicas 1 }}
{{- fail "replicas must be at least 1" }}
{{- end }}
{{- if and .Values.controllers.enabled (gt $replicas 1) (not .Values.controllers.leaderElection) }}
{{- fail "controllers.leaderElection must be true with more than one replica, or every replica would evict pods" }}
{{- end }}
{{- if and (eq .Values.certificates.source "provided") (not .Values.certificates.provided.caBundle) }}
{{- fail "certificates.source=provided needs certificates.provided.caBundle (the base64 ca.crt of the Secret)" }}
{{- end }}
{{- end }}

{{- define "dra-extender.tlsSecret" -}}
{{- if eq .Values.certificates.source "provided" }}{{ .Values.certificates.provided.secretName }}
{{- else }}dra-extender-tls{{ end }}
{{- end }}

{{/* self-signed: one CA and serving certificate per render, shared by the Secret and the webhooks. */}}
{{- define "dra-extender.generatedTLS" -}}
{{- if not (hasKey .Values "generatedTLS") }}
{{- $ns := .Release.Namespace }}
{{- $ca := genCA (printf "dra-extender webhook CA (dra-extender-webhook.%s)" $ns) 3650 }}
{{- $names := list "dra-extender-webhook" (printf "dra-extender-webhook.%s" $ns) (printf "dra-extender-webhook.%s.svc" $ns) (printf "dra-extender-webhook.%s.svc.cluster.local" $ns) (printf "dra-extender.%s.svc" $ns) (printf "dra-extender.%s.svc.cluster.local" $ns) }}
{{- $cert := genSignedCert (printf "dra-extender-webhook.%s.svc" $ns) nil $names (int .Values.certificates.selfSignedDays) $ca }}
{{- $_ := set .Values "generatedTLS" (dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key) }}
{{- end }}
{{- end }}

{{- define "dra-extender.caBundle" -}}
{{- if eq .Values.certificates.source "self-signed" }}
{{- include "dra-extender.generatedTLS" . }}
{{- .Values.generatedTLS.ca | b64enc }}
{{- else if eq .Values.certificates.source "provided" }}
{{- .Values.certificates.provided.caBundle }}
{{- end }}
{{- end }}

{{- define "dra-extender.webhookMetadata" -}}
metadata:
  name: dra-extender
  labels:
    {{- include "dra-extender.labels" . | nindent 4 }}
  {{- if eq .Values.certificates.source "cert-manager" }}
  annotations:
    cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/dra-extender-serving
  {{- end }}
{{- end }}

{{- define "dra-extender.clientConfig" -}}
clientConfig:
  service:
    name: dra-extender-webhook
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- with include "dra-extender.caBundle" .root }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}
