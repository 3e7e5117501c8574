{{/*
Where Waterline runs: namespace.name, else the release's namespace.
*/}}
{{- define "waterline.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/*
The prefix of cluster-scoped names: fullnameOverride, else the release name (with
"-waterline" appended unless it contains "waterline"). Release "waterline" gives
deploy/'s names; two releases never share a ClusterRole.
*/}}
{{- define "waterline.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "waterline" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-waterline" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
Helm's labels on every object it makes (not on pod templates, whose labels are the
workloads' selectors). The equality test with deploy/ leaves exactly these out.
*/}}
{{- define "waterline.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "waterline.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
A program's flags from its values (dict "program" "agent"|"controller" "values" ...):
--interval, --log-level, and --config when it has settings (the ConfigMap
waterline-config, mounted at /etc/waterline).
*/}}
{{- define "waterline.flags" -}}
{{- with .values.interval }}
- --interval={{ . }}
{{- end }}
{{- with .values.logLevel }}
- --log-level={{ . }}
{{- end }}
{{- if .values.settings }}
- --config=/etc/waterline/{{ .program }}.yaml
{{- end }}
{{- end -}}

{{/*
The config file of one program: its settings under their sections (the agent's under
agent:, the controller's sections at the top), as the programs read them.
*/}}
{{- define "waterline.config" -}}
{{- if eq .program "agent" -}}
{{- dict "agent" .values.settings | toYaml -}}
{{- else -}}
{{- .values.settings | toYaml -}}
{{- end -}}
{{- end -}}
