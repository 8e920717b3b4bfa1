{{/* Names, labels, the secret's keys and the kubernetes pack's RBAC. */}}

{{- define "opsloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "opsloop.fullname" -}}
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

{{- define "opsloop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "opsloop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "opsloop.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "opsloop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: opsloop
{{- end }}

{{- define "opsloop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "opsloop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "opsloop.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The kubernetes pack is on: `packs` names it. */}}
{{- define "opsloop.k8sEnabled" -}}
{{- if has "kubernetes" .Values.packs }}true{{ end }}
{{- end }}

{{/* The runbooks' folder in the container, or nothing. */}}
{{- define "opsloop.runbooksDir" -}}
{{- if .Values.runbooks.gitSync.enabled }}
{{- printf "/runbooks/checkout/%s" .Values.runbooks.gitSync.subPath | trimSuffix "/" }}
{{- else if .Values.runbooks.files }}/etc/opsloop/runbooks
{{- end }}
{{- end }}

{{/*
Variables read from the secret: name → required. SLACK_SIGNING_SECRET in http mode,
SLACK_APP_TOKEN in socket mode, REDIS_URL unless redis.url is given (or in sentinel mode,
where it is optional), LLM_MODEL unless llm.model is given.
*/}}
{{- define "opsloop.secretEnv" -}}
SLACK_BOT_TOKEN: true
{{- if eq .Values.mode "socket" }}
SLACK_APP_TOKEN: true
{{- else }}
SLACK_SIGNING_SECRET: true
{{- end }}
{{- if not .Values.redis.url }}
REDIS_URL: {{ ne .Values.redis.mode "sentinel" }}
{{- end }}
{{- if not .Values.llm.model }}
LLM_MODEL: true
{{- end }}
LLM_API_KEY: false
OPENAI_API_KEY: false
ANTHROPIC_API_KEY: false
OPSLOOP_ALERTS_TOKEN: false
POSTGRES_URL: false
{{- end }}

{{/*
What each kubernetes pack tool needs, one "apiGroup|resource|verb" each: the chart's copy of
tools/packs/k8s_rbac.py (tests/deploy/test_chart.py checks the rendered roles against it).
*/}}
{{- define "opsloop.k8sPermissions" -}}
k8s_get: ["|pods|list", "apps|deployments|list", "apps|statefulsets|list", "apps|daemonsets|list", "|nodes|list", "|services|list", "|events|list"]
k8s_describe: ["|pods|get", "apps|deployments|get", "apps|statefulsets|get", "apps|daemonsets|get", "|nodes|get", "|services|get", "|events|list", "|pods|list"]
k8s_logs: ["|pods|get", "|pods/log|get"]
k8s_events: ["|events|list"]
k8s_rollout_restart: ["apps|deployments|get", "apps|deployments|patch", "apps|statefulsets|get", "apps|statefulsets|patch", "apps|daemonsets|get", "apps|daemonsets|patch"]
k8s_scale: ["apps|deployments/scale|get", "apps|deployments/scale|patch", "apps|statefulsets/scale|get", "apps|statefulsets/scale|patch"]
k8s_delete_pod: ["|pods|delete"]
opsloop_check: ["|namespaces|get"]
{{- end }}

{{- define "opsloop.k8sReadTools" -}}
["k8s_get", "k8s_describe", "k8s_logs", "k8s_events", "opsloop_check"]
{{- end }}

{{/*
RBAC rules for a list of tools: one rule per (apiGroup, resource), verbs sorted.
Call with (dict "tools" LIST "namespaced" BOOL); a Role leaves out cluster-scoped resources.
*/}}
{{- define "opsloop.rbacRules" -}}
{{- $perms := fromYaml (include "opsloop.k8sPermissions" .) }}
{{- $namespaced := .namespaced }}
{{- $byResource := dict }}
{{- range $tool := .tools }}
{{- range $p := (get $perms $tool | default list) }}
{{- $parts := splitList "|" $p }}
{{- $resource := index $parts 1 }}
{{- if not (and $namespaced (has (first (splitList "/" $resource)) (list "nodes" "namespaces"))) }}
{{- $key := printf "%s|%s" (index $parts 0) $resource }}
{{- $_ := set $byResource $key (append (get $byResource $key | default list) (index $parts 2) | uniq | sortAlpha) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key := keys $byResource | sortAlpha }}
{{- $parts := splitList "|" $key }}
- apiGroups: [{{ index $parts 0 | quote }}]
  resources: [{{ index $parts 1 | quote }}]
  verbs: {{ get $byResource $key | toJson }}
{{- end }}
{{- end }}
