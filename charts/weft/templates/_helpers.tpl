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
