{{/* Name of the chart, overridable. */}}
{{- define "deepinfer-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects; cluster-scoped objects carry it too, so releases never collide. */}}
{{- define "deepinfer-operator.fullname" -}}
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

{{- define "deepinfer-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "deepinfer-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deepinfer-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "deepinfer-operator.labels" -}}
helm.sh/chart: {{ include "deepinfer-operator.chart" . }}
{{ include "deepinfer-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: deepinfer
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "deepinfer-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "deepinfer-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "deepinfer-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Every API permission the operator uses, with exact verbs and no wildcards. The same list is
shipped in config/rbac/role.yaml (a test keeps the two equal).
*/}}
{{- define "deepinfer-operator.rules" -}}
# The resource it reconciles, and its status.
- apiGroups: [deepinfer.io]
  resources: [deepinferdeployments]
  verbs: [get, list, watch]
- apiGroups: [deepinfer.io]
  resources: [deepinferdeployments/status]
  verbs: [get, patch, update]
# Worker pods (server-side apply = patch) and their deepinfer.io/accepted readiness condition.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch, update]
# A headless Service per serving group and a Service per role.
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# A PodDisruptionBudget per role, so a node drain takes down no more groups than a rollout may.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, patch, delete]
# The spec of each revision, so the serving revision's groups are rebuilt while another is judged.
- apiGroups: [apps]
  resources: [controllerrevisions]
  verbs: [list, create, patch, delete]
# A PodGroup per serving group and multi-pod acceptance run, so the scheduler binds all ranks or none
# (only used where the API server serves scheduling.k8s.io/v1beta1).
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [list, create, patch, delete]
# Checkpoint fetch, verification and acceptance Jobs.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
# Checks that the checkpoint claim exists and is bound.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# Acceptance spec (get for promptsFrom, server-side apply = create + patch) and the evidence
# ConfigMap it creates before each run. get/update are also what the acceptance judge's Role
# grants on that one name, and Kubernetes only lets the operator grant what it holds itself.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update, patch]
# The acceptance judge's per-deployment identity.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
# Events (kube-rs publishes events.k8s.io/v1; core events for older readers).
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end }}
