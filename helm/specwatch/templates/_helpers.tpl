{{/*
Naming and labels follow the prometheus-community exporter charts.
*/}}
{{- define "specwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specwatch.fullname" -}}
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

{{/*
Chart labels merged with extra labels (the extra ones win), rendered once so no key is duplicated:
  include "specwatch.labelsWith" (list . .Values.serviceMonitor.additionalLabels)
*/}}
{{- define "specwatch.labelsWith" -}}
{{- $ctx := index . 0 }}
{{- $labels := include "specwatch.labels" $ctx | fromYaml }}
{{- range $extra := rest . }}
{{- $labels = merge (deepCopy ($extra | default dict)) $labels }}
{{- end }}
{{- toYaml $labels }}
{{- end }}

{{- define "specwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specwatch.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "specwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specwatch.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (include "specwatch.chart" .)
  "app.kubernetes.io/version" (.Chart.AppVersion | toString)
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/component" "metrics"
  "app.kubernetes.io/part-of" "specwatch" }}
{{- $labels = merge $labels (include "specwatch.selectorLabels" . | fromYaml) }}
{{- if .Values.releaseLabel }}
{{- $_ := set $labels "release" .Release.Name }}
{{- end }}
{{- with .Values.commonLabels }}
{{- /* commonLabels never override the chart's own labels (selectors depend on them). */}}
{{- $labels = merge $labels (tpl (toYaml .) $ | fromYaml) }}
{{- end }}
{{- toYaml $labels }}
{{- end }}

{{- define "specwatch.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repo $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{- define "specwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specwatch.configMapName" -}}
{{- include "specwatch.fullname" . }}
{{- end }}

{{/*
The specwatch config file (DESIGN.md §9). Empty values are omitted so the exporter's defaults apply;
`listen` follows containerPort; sidecar mode defaults the target to vLLM on loopback.
*/}}
{{- define "specwatch.configYaml" -}}
{{- $cfg := dict "listen" (printf ":%d" (int .Values.containerPort)) }}
{{- range $key, $value := .Values.config }}
{{- if not (empty $value) }}
{{- $_ := set $cfg $key $value }}
{{- end }}
{{- end }}
{{- if empty .Values.config.targets }}
{{- if eq .Values.mode "standalone" }}
{{- fail "mode=standalone polls the vLLM URLs in config.targets: set at least one, e.g. config.targets[0]={name: vllm-0, url: http://vllm-0.vllm.llm.svc:8000/metrics} (one URL per vLLM replica)" }}
{{- end }}
{{- $_ := set $cfg "targets" (list (dict "name" "vllm" "url" (printf "http://127.0.0.1:%d/metrics" (int .Values.sidecar.vllmPort)))) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Annotation value that changes whenever the config changes. Only this chart's own Deployment
(standalone mode) carries it: a vLLM pod never does, since rolling it would reload model weights on
every replica for a config change that `specwatch run` applies in place (file change or SIGHUP).
*/}}
{{- define "specwatch.configChecksum" -}}
{{- include "specwatch.configYaml" . | sha256sum }}
{{- end }}

{{/*
The specwatch container as a single mapping. Used by this chart's Deployment (standalone mode) and,
in sidecar mode, by a host chart:
    containers:
      - {{ include "specwatch.sidecarContainer" .Subcharts.specwatch | indent 8 | trim }}
It is restricted-PSS compliant on its own (the pod security context belongs to the host).
In sidecar mode it can never take the vLLM pod out of its Service: no readiness probe (a pod is
Ready only when all its containers are), SPECWATCH_MODE=sidecar so the process never exits on a
bad config, and --listen on the command line so the liveness probe finds it even then.
*/}}
{{- define "specwatch.sidecarContainer" -}}
{{- $sidecar := eq .Values.mode "sidecar" }}
name: {{ .Values.sidecar.containerName }}
image: {{ include "specwatch.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  - run
  - --config
  - /etc/specwatch/specwatch.yaml
  - --listen
  - {{ printf ":%d" (int .Values.containerPort) | quote }}
  {{- range .Values.extraArgs }}
  - {{ . | quote }}
  {{- end }}
env:
  - name: SPECWATCH_MODE
    value: {{ .Values.mode | quote }}
  - name: SPECWATCH_ALERT_WINDOW
    value: {{ .Values.prometheusRule.alertWindow | default "5m" | quote }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
ports:
  - name: {{ .Values.portName }}
    containerPort: {{ .Values.containerPort }}
    protocol: TCP
{{- if .Values.livenessProbe.enabled }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .Values.portName }}
  {{- toYaml (omit .Values.livenessProbe "enabled") | nindent 2 }}
{{- end }}
{{- if not $sidecar }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .Values.portName }}
  {{- toYaml .Values.readinessProbe | nindent 2 }}
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: specwatch-config
    mountPath: /etc/specwatch
    readOnly: true
  - name: specwatch-tmp
    mountPath: /tmp
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
The same container for a host chart that can add containers but not volumes (vLLM's example chart:
`extraContainers`): no config file and no mounts. The exporter's defaults apply (target
http://127.0.0.1:<sidecar.vllmPort>/metrics), tuned with SPECWATCH_* variables in extraEnv. A change
of those variables changes the pod template, so prefer the ConfigMap (patch) where it is possible.
*/}}
{{- define "specwatch.sidecarContainerEnvOnly" -}}
{{- $c := include "specwatch.sidecarContainer" . | fromYaml }}
{{- $_ := unset $c "volumeMounts" }}
{{- $args := list }}
{{- $skip := false }}
{{- range $c.args }}
{{- if eq . "--config" }}
{{- $skip = true }}
{{- else if $skip }}
{{- $skip = false }}
{{- else }}
{{- $args = append $args . }}
{{- end }}
{{- end }}
{{- $_ := set $c "args" $args }}
{{- $env := list (dict "name" "SPECWATCH_TARGET_URL" "value" (printf "http://127.0.0.1:%d/metrics" (int .Values.sidecar.vllmPort))) }}
{{- $_ := set $c "env" (concat $env $c.env) }}
{{- toYaml $c }}
{{- end }}

{{/* The volumes the container needs, as list items (host charts append them to their pod's volumes). */}}
{{- define "specwatch.sidecarVolumes" -}}
- name: specwatch-config
  configMap:
    name: {{ include "specwatch.configMapName" . }}
- name: specwatch-tmp
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{/* Checks that depend on more than one value (the schema checks single values). */}}
{{- define "specwatch.validate" -}}
{{- $windows := .Values.config.windows | default (list "1m" "5m") }}
{{- if and .Values.prometheusRule.enabled (not (has (.Values.prometheusRule.alertWindow | default "5m") $windows)) }}
{{- fail (printf "prometheusRule.alertWindow=%s is not one of config.windows %v: the alerts read window=%q, which the sidecar would never export, so they could never fire" (.Values.prometheusRule.alertWindow | default "5m") $windows (.Values.prometheusRule.alertWindow | default "5m")) }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.serviceMonitor.enabled }}
{{- fail "serviceMonitor needs mode=standalone (sidecar mode has no Service): use podMonitor.enabled=true with podMonitor.selectorOverride set to the vLLM pods' labels" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.podMonitor.enabled (empty .Values.podMonitor.selectorOverride) }}
{{- fail "podMonitor.selectorOverride is required in sidecar mode: the labels of the vLLM pods that carry the specwatch container (an empty selector would scrape every pod)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.networkPolicy.enabled }}
{{- fail "networkPolicy needs mode=standalone: in sidecar mode a NetworkPolicy selects the whole vLLM pod and would cut its serving traffic; allow the specwatch port in the vLLM chart's own policy instead" }}
{{- end }}
{{- end }}
