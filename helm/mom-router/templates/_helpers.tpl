{{/* Resource names: the release name, suffixed. */}}
{{- define "mom-router.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mom-router.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mom-router.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mom-router.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The one supported attach mode, or a template error naming the choices. */}}
{{- define "mom-router.mode" -}}
{{- $mode := .Values.mode -}}
{{- if not (has $mode (list "standalone" "envoyGateway" "istio")) -}}
{{- fail (printf "mode: %q is not one of standalone, envoyGateway, istio" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The Redis address mom-router's config must name, when the chart provides or is told of one. */}}
{{- define "mom-router.redisAddress" -}}
{{- if .Values.redis.enabled -}}
{{- printf "%s-redis:6379" (include "mom-router.fullname" .) -}}
{{- else -}}
{{- .Values.redis.externalAddress -}}
{{- end -}}
{{- end -}}

{{/* The mom-router container's command line: the config from the ConfigMap, listening on every interface of the pod. */}}
{{- define "mom-router.args" -}}
- serve
- --config
- /etc/mom-router/config.yaml
- --grpc-listen
- {{ printf "0.0.0.0:%d" (int .Values.grpcPort) }}
- --admin-listen
- {{ printf "0.0.0.0:%d" (int .Values.adminPort) }}
- --log-json
- --drain-grace-seconds
- {{ int .Values.drain.graceSeconds | quote }}
- --drain-limit-seconds
- {{ int .Values.drain.limitSeconds | quote }}
{{- with .Values.workerThreads }}
- --worker-threads
- {{ int . | quote }}
{{- end }}
{{- end -}}
