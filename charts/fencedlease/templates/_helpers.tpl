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
{{- define "fencedlease.scaleGuard" -}}
{{ include "fencedlease.fullname" . }}-scale-guard
{{- end }}
{{- define "fencedlease.webhookService" -}}
{{ include "fencedlease.fullname" . }}-webhook-service
{{- end }}
{{- define "fencedlease.certSecret" -}}
{{ include "fencedlease.fullname" . }}-webhook-cert
{{- end }}
{{- define "fencedlease.tokenSecret" -}}
{{ include "fencedlease.fullname" . }}-webhook-token
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

{{/*
The name in this release of the one webhook configuration of kind .kind in
files/webhook (the operator takes one configuration of each kind: the
fencing webhook's and the pod webhook's).
*/}}
{{- define "fencedlease.webhookConfigurationOf" -}}
{{- $kind := .kind }}
{{- $names := list }}
{{- range (include "fencedlease.webhookConfigurations" .root | fromYaml).items }}
{{- if eq .kind $kind }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}
{{- if ne (len $names) 1 }}
{{- fail (printf "files/webhook has %d objects of kind %s, want one" (len $names) $kind) }}
{{- end }}
{{- first $names }}
{{- end }}

{{/*
The names in this release of what the generated rules (files/rbac/role.yaml)
name by resourceNames. Those rules come from the +kubebuilder:rbac markers,
which name the objects as config/ does before kustomize's namePrefix (the
operator's defaults): the webhook configurations of files/webhook, which
become "<fullname>-<name>", and the Secret with the webhooks' path token,
which the operator creates as --webhook-token-secret. Returned as YAML:
{resource: {name in config/: name in this release}}.
*/}}
{{- define "fencedlease.resourceNames" -}}
{{- $validating := dict }}
{{- $mutating := dict }}
{{- range (include "fencedlease.webhookConfigurations" . | fromYaml).items }}
{{- if eq .kind "ValidatingWebhookConfiguration" }}
{{- $_ := set $validating .object.metadata.name .name }}
{{- else }}
{{- $_ := set $mutating .object.metadata.name .name }}
{{- end }}
{{- end }}
{{- $secrets := dict "fencedlease-webhook-token" (include "fencedlease.tokenSecret" .) }}
{{- $clusterroles := dict "scale-guard" (include "fencedlease.scaleGuard" .) }}
{{- toYaml (dict "validatingwebhookconfigurations" $validating "mutatingwebhookconfigurations" $mutating "secrets" $secrets "clusterroles" $clusterroles) }}
{{- end }}

{{/*
Rules of a role in files/rbac (copies of config/rbac): of the one object of
kind .kind in .file (ClusterRole by default), with resourceNames renamed to
this release's objects (fencedlease.resourceNames). A resourceName the chart
does not know fails the render: the chart would grant a name it never
installs.
*/}}
{{- define "fencedlease.rulesFrom" -}}
{{- $kind := .kind | default "ClusterRole" }}
{{- $file := .file }}
{{- $objs := list }}
{{- range regexSplit "(?m)^---[ \t]*$" (.root.Files.Get $file) -1 }}
{{- $doc := fromYaml . }}
{{- if and $doc (eq ($doc.kind | default "") $kind) }}
{{- $objs = append $objs $doc }}
{{- end }}
{{- end }}
{{- if ne (len $objs) 1 }}
{{- fail (printf "%s has %d objects of kind %s, want one: run make manifests" $file (len $objs) $kind) }}
{{- end }}
{{- $obj := first $objs }}
{{- if not $obj.rules }}
{{- fail (printf "%s: %s %s has no rules: run make manifests" $file $kind $obj.metadata.name) }}
{{- end }}
{{- $names := include "fencedlease.resourceNames" .root | fromYaml }}
{{- $rules := list }}
{{- range $obj.rules }}
{{- $rule := deepCopy . }}
{{- if $rule.resourceNames }}
{{- $renamed := list }}
{{- range $n := $rule.resourceNames }}
{{- $to := "" }}
{{- range $res := $rule.resources }}
{{- $to = $to | default (dig $res $n "" $names) }}
{{- end }}
{{- if not $to }}
{{- fail (printf "%s: %s %s grants %v named %q, which the chart does not install: name it in fencedlease.resourceNames (templates/_helpers.tpl)" $file $kind $obj.metadata.name $rule.resources $n) }}
{{- end }}
{{- $renamed = append $renamed $to }}
{{- end }}
{{- $_ := set $rule "resourceNames" $renamed }}
{{- end }}
{{- $rules = append $rules $rule }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/*
Whether files/rbac/role.yaml has a namespaced Role (rules for the operator's
own namespace, "system" in config/): "true" or "".
*/}}
{{- define "fencedlease.hasNamespacedRole" -}}
{{- range regexSplit "(?m)^---[ \t]*$" (.Files.Get "files/rbac/role.yaml") -1 }}
{{- $doc := fromYaml . }}
{{- if and $doc (eq ($doc.kind | default "") "Role") }}
{{- if ne ($doc.metadata.namespace | default "") "system" }}
{{- fail (printf "files/rbac/role.yaml: Role %s is in namespace %q: the chart knows only the operator's own (system)" $doc.metadata.name ($doc.metadata.namespace | default "")) }}
{{- end }}
{{- print "true" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A list of strings as a CEL list literal of string literals. */}}
{{- define "fencedlease.celList" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}'{{ $v | replace "\\" "\\\\" | replace "'" "\\'" }}'{{ end }}]
{{- end }}

{{/*
The fence gateway's labels: a name of its own, so that the operator's
selectors (Services, PodDisruptionBudget) never pick its pods.
*/}}
{{- define "fencedlease.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "fencedlease.name" . }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fencedlease.gatewayLabels" -}}
helm.sh/chart: {{ include "fencedlease.chart" . }}
{{ include "fencedlease.gatewaySelectorLabels" . }}
app.kubernetes.io/component: fence-gateway
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
