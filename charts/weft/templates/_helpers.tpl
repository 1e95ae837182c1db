{{- define "weft.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "weft.operatorName" -}}
{{- printf "%s-operator" (include "weft.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "weft.labels" -}}
app.kubernetes.io/name: weft-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "weft.selectorLabels" -}}
app.kubernetes.io/name: weft-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weft.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "weft.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The operator's pods, as a NetworkPolicyPeer: the namespace by its
kubernetes.io/metadata.name label (set by Kubernetes from 1.21; label the
namespace yourself before that), the pods by the selector labels. */ -}}
{{- define "weft.operatorPeer" -}}
namespaceSelector:
  matchLabels: {kubernetes.io/metadata.name: {{ .Release.Namespace }}}
podSelector:
  matchLabels:
    {{- include "weft.selectorLabels" . | nindent 4 }}
{{- end -}}

{{- /* The rules for TrainingJobs and their children: one line per resource,
so a verb added in the operator's code is added here in one place. Secrets:
create only. The operator never reads a Secret (the pods take the rendezvous
token from theirs by secretKeyRef), and RBAC cannot limit get or list to the
Secrets it made. PodGroups (scheduler-plugins' and Volcano's): the gang of
a job with spec.scheduling.gang podgroup; a cluster without those CRDs
serves neither, and the rule grants nothing there. */ -}}
{{- define "weft.jobRules" }}
- apiGroups: [weft.dev]
  resources: [trainingjobs]
  verbs: [get, list, watch, delete]
- apiGroups: [weft.dev]
  resources: [trainingjobs/status]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.networkPolicy.perJob }}
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch]
{{- end }}
- apiGroups: [scheduling.x-k8s.io, scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [get, create, patch, delete]
{{- if .Values.operator.kueue }}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, watch, create, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
{{- end }}
{{- end }}

{{- /* operator.kueue: Kueue's cluster-scoped objects a Workload's admission and a job's priority label name. */ -}}
{{- define "weft.kueueClusterRules" }}
- apiGroups: [kueue.x-k8s.io]
  resources: [resourceflavors, workloadpriorityclasses]
  verbs: [get]
{{- end }}

{{- define "weft.leaseRules" }}
{{- if .Values.operator.leaderElect }}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
{{- end }}
{{- end }}

{{- /*
The relabelling of every TrainingJob rank's metrics target, once, in the
PodMonitor's spelling (relabelings); weft.workerRelabelConfigs spells the same
rules for a plain Prometheus (relabel_configs). Kept: pods the operator made,
their metrics ports (one a local rank: metrics, metrics-1, ...), Running
pods only (a finished job's targets go away). Set: the labels the overlap
dashboard reads; the TrainingJob's name goes into a label of its own,
trainingjob, so `job` keeps the scraper's meaning (the scrape job) and a
TrainingJob named like another scrape job (kubelet) shares no series with it.
*/ -}}
{{- define "weft.workerRelabelings" -}}
- action: keep
  sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_managed_by]
  regex: weft-operator
- action: keep
  sourceLabels: [__meta_kubernetes_pod_container_port_name]
  regex: metrics(-[0-9]+)?
- action: keep
  sourceLabels: [__meta_kubernetes_pod_phase]
  regex: Running
- action: replace
  sourceLabels: [__meta_kubernetes_namespace]
  targetLabel: namespace
- action: replace
  sourceLabels: [__meta_kubernetes_pod_label_weft_dev_job]
  targetLabel: trainingjob
- action: replace
  sourceLabels: [__meta_kubernetes_pod_name]
  targetLabel: pod
- action: replace
  sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
{{- end }}

{{- define "weft.workerRelabelConfigs" -}}
{{ include "weft.workerRelabelings" . | replace "sourceLabels:" "source_labels:" | replace "targetLabel:" "target_label:" }}
{{- end }}

{{- /*
The operator's own metrics target for a plain Prometheus: its pods (the
chart's selector labels) in the release namespace, port metrics. The tuner's
series carry the TrainingJob's namespace and trainingjob labels: honor_labels
keeps them (the operator dashboard selects by them); the operator's own
series have neither and take the target's namespace.
*/ -}}
{{- define "weft.operatorScrapeConfig" -}}
- job_name: weft-operator
  scrape_interval: {{ .Values.metrics.scrapeConfig.interval }}
  metrics_path: /metrics
  honor_labels: true
  kubernetes_sd_configs:
  - role: pod
    namespaces:
      names: [{{ .Release.Namespace | quote }}]
  relabel_configs:
  - action: keep
    source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name, __meta_kubernetes_pod_label_app_kubernetes_io_instance]
    regex: weft-operator;{{ .Release.Name }}
  - action: keep
    source_labels: [__meta_kubernetes_pod_container_port_name]
    regex: metrics
  - action: keep
    source_labels: [__meta_kubernetes_pod_phase]
    regex: Running
  - action: replace
    source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - action: replace
    source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
{{- end }}
