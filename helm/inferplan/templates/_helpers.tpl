{{/* Names, labels and shared fragments. */}}

{{- define "inferplan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "inferplan.fullname" -}}
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

{{- define "inferplan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inferplan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "inferplan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "inferplan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: inferplan
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "inferplan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inferplan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "inferplan.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The environment variables the chart sets itself, each with the value that sets it: extraEnv may not set them
too (a second definition would override the chart's while the ports, Roles and peering objects follow the
value; INFERPLAN_PEERING_PRIORITY, which no value sets, is left to extraEnv). */}}
{{- define "inferplan.chartEnv" -}}
POD_ID: the chart (the pod's name)
INFERPLAN_NAMESPACES: watchNamespaces
INFERPLAN_RESYNC_SECONDS: operator.resyncSeconds
INFERPLAN_CHECK_SECONDS: operator.checkSeconds
INFERPLAN_LOG_LEVEL: operator.logLevel
INFERPLAN_PLANNER_PROCESSES: operator.plannerProcesses
INFERPLAN_PLANNER_THREADS: operator.plannerThreads
INFERPLAN_VERIFY: operator.verify
INFERPLAN_METRICS_PORT: operator.metricsPort
INFERPLAN_HEALTH_PORT: operator.healthPort
INFERPLAN_OBSERVE_SECONDS: operator.observeSeconds
INFERPLAN_OBSERVE_THREADS: operator.observeThreads
INFERPLAN_PROMETHEUS_CONFIG: prometheus.endpoints
INFERPLAN_PEERING: peering.enabled and peering.name
INFERPLAN_PEERING_LIFETIME: peering.lifetimeSeconds
{{- end }}

{{/* The file INFERPLAN_PROMETHEUS_CONFIG names: a YAML list of {name, url, timeoutSeconds, bearerTokenFile,
caFile}; Secrets and ConfigMaps named by an endpoint are mounted under /etc/inferplan/prometheus/INDEX/. */}}
{{- define "inferplan.prometheusConfig" -}}
{{- $endpoints := list }}
{{- $names := dict }}
{{- range $i, $ep := .Values.prometheus.endpoints }}
{{- if hasKey $names $ep.name }}
{{- fail (printf "prometheus.endpoints: the name %q is used twice" $ep.name) }}
{{- end }}
{{- $_ := set $names $ep.name true }}
{{- if and $ep.bearerTokenSecret $ep.bearerTokenFile }}
{{- fail (printf "prometheus.endpoints[%d]: give bearerTokenSecret or bearerTokenFile, not both" $i) }}
{{- end }}
{{- if gt (len (compact (list $ep.caSecret $ep.caConfigMap $ep.caFile))) 1 }}
{{- fail (printf "prometheus.endpoints[%d]: give at most one of caSecret, caConfigMap, caFile" $i) }}
{{- end }}
{{- $out := dict "name" $ep.name "url" $ep.url }}
{{- if $ep.timeoutSeconds }}
{{- $_ := set $out "timeoutSeconds" $ep.timeoutSeconds }}
{{- end }}
{{- if $ep.bearerTokenSecret }}
{{- $_ := set $out "bearerTokenFile" (printf "/etc/inferplan/prometheus/%d/token/token" $i) }}
{{- else if $ep.bearerTokenFile }}
{{- $_ := set $out "bearerTokenFile" $ep.bearerTokenFile }}
{{- end }}
{{- if or $ep.caSecret $ep.caConfigMap }}
{{- $_ := set $out "caFile" (printf "/etc/inferplan/prometheus/%d/ca/ca.crt" $i) }}
{{- else if $ep.caFile }}
{{- $_ := set $out "caFile" $ep.caFile }}
{{- end }}
{{- $endpoints = append $endpoints $out }}
{{- end }}
{{- toYaml $endpoints }}
{{- end }}

{{/* Rules that the operator needs wherever its plans are (cluster-wide, or in each watched namespace). Each
rule says which feature needs it; tests/e2e/test_rbac.py shows that removing any one makes that feature fail. */}}
{{- define "inferplan.planRules" -}}
# Plans: kopf lists and watches them (the operator writes nothing but their status: no finalizer, no annotations).
- apiGroups: [inferplan.io]
  resources: [inferencecapacityplans]
  verbs: [list, watch]
# Plan status: the answer.
- apiGroups: [inferplan.io]
  resources: [inferencecapacityplans/status]
  verbs: [patch]
# Warning events on plans the planner cannot use (e.g. an unknown model).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
# spec.model.configMapRef: the model's config.json from a ConfigMap in the plan's namespace.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
# spec.observe.current.deployment: the serving Deployment's replicas, GPUs and batch.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get]
{{- end }}

{{/* Cluster-scoped reads, needed in both modes. */}}
{{- define "inferplan.clusterRules" -}}
# The GPU inventory: a kopf index over the nodes' GPU labels and allocatable GPUs.
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
# kopf's resource discovery: notices the plan CRD being created or upgraded while the operator runs.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}

{{/* The cleanup hook's name and labels (templates/cleanup-kopf-state.yaml): its own app.kubernetes.io/name, so
that the operator's Service, which selects the operator's pods by name and instance, never selects its pod. */}}
{{- define "inferplan.cleanupName" -}}
{{- printf "%s-cleanup-kopf-state" (include "inferplan.fullname" . | trunc 44 | trimSuffix "-") }}
{{- end }}

{{- define "inferplan.cleanupLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ printf "%s-cleanup-kopf-state" (include "inferplan.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: cleanup-kopf-state
app.kubernetes.io/part-of: inferplan
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The annotations of the cleanup hook's objects; the argument is the hook weight. */}}
{{- define "inferplan.cleanupHook" -}}
helm.sh/hook: post-install,post-upgrade
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
