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

{{/* Combinations that cannot work refuse to render, naming what is wrong (values.schema.json has already
refused unknown keys, wrong types and unknown modes or sources). */}}
{{- define "dra-extender.validate" -}}
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
{{- if hasKey .Values.podLabels "app.kubernetes.io/name" }}
{{- fail "podLabels cannot set app.kubernetes.io/name: it is the Deployment's selector" }}
{{- end }}
{{- end }}

{{/* The image `dra-extender serve` runs from (the helm test pod too): the chart's appVersion unless
image.tag says otherwise. */}}
{{- define "dra-extender.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Empty (null) priorityClassName: system-cluster-critical in scheduler-config mode (values.yaml says
why), none in second-scheduler mode; "" means none in either. */}}
{{- define "dra-extender.priorityClassName" -}}
{{- if not (kindIs "invalid" .Values.priorityClassName) }}{{ .Values.priorityClassName }}
{{- else if not (include "dra-extender.secondScheduler" .) }}system-cluster-critical
{{- end }}
{{- end }}

{{- define "dra-extender.schedulerConfig" -}}
{{ tpl (.Files.Get "files/dra-scheduler-config.yaml") . }}
{{- end }}

{{/* A hash of what the pod reads besides its own spec: the second scheduler's configuration and the
serving certificate when the chart knows it. Kubernetes restarts nothing when a mounted ConfigMap
changes, and the extender port reads its certificate only at start; as a pod annotation, any change
rolls the pods. */}}
{{- define "dra-extender.configChecksum" -}}
{{- $parts := list }}
{{- if include "dra-extender.secondScheduler" . }}
{{- $parts = append $parts (include "dra-extender.schedulerConfig" .) }}
{{- end }}
{{- if eq .Values.certificates.source "self-signed" }}
{{- include "dra-extender.generatedTLS" . }}
{{- $parts = append $parts .Values.generatedTLS.cert }}
{{- else if eq .Values.certificates.source "provided" }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.certificates.provided.secretName }}
{{- $parts = append $parts (dig "data" (dict) $secret | toJson) }}
{{- end }}
{{- $parts | toJson | sha256sum }}
{{- end }}

{{- define "dra-extender.tlsSecret" -}}
{{- if eq .Values.certificates.source "provided" }}{{ .Values.certificates.provided.secretName }}
{{- else }}dra-extender-tls{{ end }}
{{- end }}

{{/* self-signed: one CA and serving certificate per release, shared by the Secret and the webhooks, and
in scheduler-config mode kube-scheduler's client certificate from the same CA. An upgrade keeps those
of the existing Secrets (the CA and the client certificate may have been copied to the control-plane
nodes for scheduler-config mode) until the renew-after time, then makes new ones; so does a switch to
scheduler-config mode that finds no client certificate of that CA (the CA's key is not kept).
`helm template` cannot look, so it always makes new ones. */}}
{{- define "dra-extender.generatedTLS" -}}
{{- if not (hasKey .Values "generatedTLS") }}
{{- $ns := .Release.Namespace }}
{{- $now := now | unixEpoch | int64 }}
{{- $existing := lookup "v1" "Secret" $ns "dra-extender-tls" }}
{{- $data := dig "data" (dict) $existing }}
{{- $client := dig "data" (dict) (lookup "v1" "Secret" $ns "dra-extender-kube-scheduler-client") }}
{{- $clientKept := or (include "dra-extender.secondScheduler" .) (and (hasKey $client "tls.crt") (hasKey $client "tls.key") (eq (index $client "ca.crt" | default "") (index $data "ca.crt" | default "-"))) }}
{{- $renewAfter := dig "metadata" "annotations" "dra-extender.io/renew-after" "0" $existing | int64 }}
{{- if and (hasKey $data "tls.crt") (hasKey $data "tls.key") (hasKey $data "ca.crt") (lt $now $renewAfter) $clientKept }}
{{- $_ := set .Values "generatedTLS" (dict "ca" (index $data "ca.crt" | b64dec) "cert" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec) "renewAfter" $renewAfter "clientCert" (index $client "tls.crt" | default "" | b64dec) "clientKey" (index $client "tls.key" | default "" | b64dec)) }}
{{- else }}
{{- $days := int .Values.certificates.selfSignedDays }}
{{- $ca := genCA (printf "dra-extender webhook CA (dra-extender-webhook.%s)" $ns) (max 3650 $days | int) }}
{{- $names := list "dra-extender-webhook" (printf "dra-extender-webhook.%s" $ns) (printf "dra-extender-webhook.%s.svc" $ns) (printf "dra-extender-webhook.%s.svc.cluster.local" $ns) (printf "dra-extender.%s.svc" $ns) (printf "dra-extender.%s.svc.cluster.local" $ns) }}
{{- $cert := genSignedCert (printf "dra-extender-webhook.%s.svc" $ns) nil $names $days $ca }}
{{- $clientCert := genSignedCert "kube-scheduler" nil nil $days $ca }}
{{- $margin := min 30 (div $days 2) }}
{{- $_ := set .Values "generatedTLS" (dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key "renewAfter" (add $now (mul (sub $days $margin) 86400)) "clientCert" $clientCert.Cert "clientKey" $clientCert.Key) }}
{{- end }}
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
