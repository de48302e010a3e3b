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
# Exactly the verbs the operator's code uses: config/rbac/needs.yaml names the code behind each
# one, and tests/chart_render.rs keeps these rules equal to that table. It lists and watches what
# it reads in bulk, writes by server-side apply (patch; create for a new object), and gets an
# object only to read it by name: what create_once finds after a 409 (its own, or another
# owner's: NameConflict), the prompts ConfigMap, and the metadata of Secrets and ConfigMaps the
# spec would hand on (the opt-in labels).
# The resource it reconciles (watched), and its status (server-side applied).
- apiGroups: [deepinfer.io]
  resources: [deepinferdeployments]
  verbs: [list, watch]
- apiGroups: [deepinfer.io]
  resources: [deepinferdeployments/status]
  verbs: [patch]
# The DeepInferRole of each role with scaling: external (created, its status written, deleted
# when the role stops being external); watched, so a scale starts a pass.
- apiGroups: [deepinfer.io]
  resources: [deepinferroles]
  verbs: [get, list, watch, create, delete]
- apiGroups: [deepinfer.io]
  resources: [deepinferroles/status]
  verbs: [patch]
# Worker pods and their deepinfer.io/accepted readiness condition.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# A headless Service per serving group and a Service per role.
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# A PodDisruptionBudget per role, so a node drain takes down no more groups than a rollout may.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# The spec of each revision, so the serving revision's groups are rebuilt while another is judged.
- apiGroups: [apps]
  resources: [controllerrevisions]
  verbs: [get, list, watch, create, patch, delete]
# A PodGroup per serving group and multi-pod acceptance run, so the scheduler binds all ranks or none
# (only used where the API server serves scheduling.k8s.io/v1beta1).
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [get, list, watch, create, patch, delete]
# With spec.accelerator.deviceClassName, the ResourceClaimTemplate engine pods claim devices from
# (Dynamic Resource Allocation).
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [get, list, watch, create, delete]
# Checkpoint fetch, verification and acceptance Jobs; patch gives a finished Job whose verdict is
# in status its ttlSecondsAfterFinished.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
# Watches claims (name and phase kept) to check that the checkpoint claim exists and is bound.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, watch]
# ConfigMaps: get reads the prompts of spec.acceptance.promptsFrom and the labels of ConfigMaps
# engine containers would read; list and watch are a metadata-only watch (an edit to those prompts
# re-runs acceptance) and list the evidence's metadata; create and patch apply the acceptance spec,
# the evidence ConfigMap created before each run, the HCCL rank tables of Ascend groups and the
# role-endpoints file of decode groups; delete removes evidence beyond --keep-evidence and those
# files once their groups are gone. get/patch are also what the acceptance judge's Role grants on
# its evidence by name (Kubernetes lets the operator grant only what it holds itself). No update.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
# Secrets: get only, for the labels and annotations (a metadata-only GET) of the hub token Secret
# and of Secrets engine containers would read: a Secret is handed on only when it opted in.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# The acceptance judge's per-deployment identity.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
# Events on condition transitions (events.k8s.io/v1).
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/*
The namespaces the operator watches and reconciles, comma-separated: the list in namespaces, else
watchNamespace, else the release namespace; "" when clusterWide (every namespace). Fails on values
that contradict each other, naming both.
*/}}
{{- define "deepinfer-operator.watchedNamespaces" -}}
{{- if and .Values.clusterWide .Values.watchNamespace }}
{{- fail "clusterWide=true watches every namespace: leave watchNamespace empty" }}
{{- end }}
{{- if and .Values.clusterWide .Values.namespaces }}
{{- fail "clusterWide=true watches every namespace and namespaces lists some: set one of them (namespaces alone needs no ClusterRole)" }}
{{- end }}
{{- if and .Values.namespaces .Values.watchNamespace }}
{{- fail "namespaces and watchNamespace both name watched namespaces: set one of them (list watchNamespace's namespace in namespaces)" }}
{{- end }}
{{- if .Values.clusterWide }}
{{- else if .Values.namespaces }}
{{- join "," .Values.namespaces }}
{{- else }}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- end }}
{{- end }}
