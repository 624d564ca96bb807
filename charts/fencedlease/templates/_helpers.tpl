{{/* The chart's name. */}}
{{- define "fencedlease.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name. With the release name "fencedlease" it is
"fencedlease", so that the objects are named as by config/default.
*/}}
{{- define "fencedlease.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fencedlease.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fencedlease.labels" -}}
helm.sh/chart: {{ include "fencedlease.chart" . }}
{{ include "fencedlease.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "fencedlease.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fencedlease.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Names of the objects that refer to each other. */}}
{{- define "fencedlease.serviceAccountName" -}}
{{ include "fencedlease.fullname" . }}-controller-manager
{{- end }}
{{- define "fencedlease.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "fencedlease.serviceAccountName" . }}
{{- end }}
{{- define "fencedlease.webhookService" -}}
{{ include "fencedlease.fullname" . }}-webhook-service
{{- end }}
{{- define "fencedlease.certSecret" -}}
{{ include "fencedlease.fullname" . }}-webhook-cert
{{- end }}
{{- define "fencedlease.certificate" -}}
{{ include "fencedlease.fullname" . }}-serving-cert
{{- end }}
{{- define "fencedlease.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The webhook configurations, read from files/webhook: copies of config/webhook
(make manifests keeps them identical, make verify checks it). Each is a dict
with "kind", "name" (the object's name in this release) and "object" (the
source object). Returned as YAML: {"items": [...]}.
*/}}
{{- define "fencedlease.webhookConfigurations" -}}
{{- $items := list }}
{{- range $path, $_ := .Files.Glob "files/webhook/*.yaml" }}
{{- range regexSplit "(?m)^---[ \t]*$" ($.Files.Get $path) -1 }}
{{- $obj := fromYaml . }}
{{- if and $obj (has $obj.kind (list "ValidatingWebhookConfiguration" "MutatingWebhookConfiguration")) }}
{{- $items = append $items (dict "kind" $obj.kind "name" (printf "%s-%s" (include "fencedlease.fullname" $) $obj.metadata.name) "object" $obj) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml (dict "items" $items) }}
{{- end }}

{{/* Rules of a role in files/rbac: copies of config/rbac. */}}
{{- define "fencedlease.rulesFrom" -}}
{{- $obj := fromYaml (.root.Files.Get .file) }}
{{- if not $obj.rules }}
{{- fail (printf "%s has no rules: run make manifests" .file) }}
{{- end }}
{{- toYaml $obj.rules }}
{{- end }}
