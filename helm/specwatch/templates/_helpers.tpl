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

{{/* image.registry wins; else the umbrella chart's global.imageRegistry (the Bitnami convention). */}}
{{- define "specwatch.imageRegistry" -}}
{{- .Values.image.registry | default (dig "imageRegistry" "" (.Values.global | default dict)) }}
{{- end }}

{{- define "specwatch.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString }}
{{- end }}

{{/*
"true" when the image is values.yaml's placeholder: repository specwatch/specwatch with no registry,
i.e. Docker Hub, where no specwatch image is published. NOTES then says how to build and push one.
*/}}
{{- define "specwatch.imageIsPlaceholder" -}}
{{- if and (not (include "specwatch.imageRegistry" .)) (eq .Values.image.repository "specwatch/specwatch") }}true{{ end }}
{{- end }}

{{- define "specwatch.image" -}}
{{- $tag := include "specwatch.imageTag" . }}
{{- $repo := .Values.image.repository }}
{{- $registry := include "specwatch.imageRegistry" . }}
{{- if $registry }}
{{- $repo = printf "%s/%s" $registry .Values.image.repository }}
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

{{/* standalone and prometheus modes run this chart's own Deployment + Service; sidecar mode does not. */}}
{{- /* Fleet mode split over shards (fleet.shards > 1): a StatefulSet, not the Deployment. */}}
{{- define "specwatch.sharded" -}}
{{- if and (eq .Values.mode "prometheus") (gt (int ((.Values.fleet).shards | default 1)) 1) }}true{{ end }}
{{- end }}

{{- define "specwatch.ownDeployment" -}}
{{- if has .Values.mode (list "standalone" "prometheus") }}true{{ end }}
{{- end }}

{{/*
honorLabels of the monitors: null means true in prometheus mode, where specwatch exports each vLLM
replica's own labels (config.prometheus.replica_labels, e.g. namespace and pod) that must keep their
names instead of becoming exported_namespace / exported_pod; false otherwise.
  include "specwatch.honorLabels" (list . .Values.serviceMonitor.honorLabels)
*/}}
{{- define "specwatch.honorLabels" -}}
{{- $value := index . 1 }}
{{- if kindIs "invalid" $value }}
{{- eq (index . 0).Values.mode "prometheus" }}
{{- else }}
{{- $value }}
{{- end }}
{{- end }}

{{/* Where prometheus.bearerTokenSecret is mounted (a directory: the kubelet updates it when the Secret rotates). */}}
{{- define "specwatch.prometheusTokenDir" -}}
/var/run/secrets/specwatch/prometheus
{{- end }}

{{- define "specwatch.prometheusTokenPath" -}}
{{- printf "%s/token" (include "specwatch.prometheusTokenDir" .) }}
{{- end }}

{{- define "specwatch.configMapName" -}}
{{- include "specwatch.fullname" . }}
{{- end }}

{{/*
The specwatch config file (keys: the chart README and the repo README, "Configuration"). Empty values
are omitted so the exporter's defaults apply; `listen` follows containerPort; sidecar mode defaults the
target to vLLM on loopback; prometheus mode polls no vLLM, so it gets no target at all.
*/}}
{{- define "specwatch.configYaml" -}}
{{- $cfg := dict "listen" (printf ":%d" (int .Values.containerPort)) }}
{{- range $key, $value := .Values.config }}
{{- if not (empty $value) }}
{{- $_ := set $cfg $key $value }}
{{- end }}
{{- end }}
{{- $fleet := not (empty .Values.config.prometheus) }}
{{- if eq .Values.mode "prometheus" }}
{{- if not (.Values.config.prometheus | default dict).url }}
{{- fail "mode=prometheus reads every vLLM replica from Prometheus: set config.prometheus.url (e.g. http://prometheus-operated.monitoring.svc:9090), and config.prometheus.selector / replica_labels for the vLLM scrape job" }}
{{- end }}
{{- if not (empty .Values.config.targets) }}
{{- fail "config.targets is not used in mode=prometheus (it polls no vLLM, it reads them from config.prometheus.url): remove it" }}
{{- end }}
{{- else if $fleet }}
{{- fail (printf "config.prometheus (fleet mode) needs mode=prometheus, not mode=%s: the exporter then polls no vLLM, and the chart runs it as its own Deployment" .Values.mode) }}
{{- end }}
{{- if and (empty .Values.config.targets) (not $fleet) }}
{{- if eq .Values.mode "standalone" }}
{{- fail "mode=standalone polls the vLLM URLs in config.targets: set at least one, e.g. config.targets[0]={name: vllm-0, url: http://vllm-0.vllm.llm.svc:8000/metrics} (one URL per vLLM replica), or use mode=prometheus with config.prometheus to read them from Prometheus" }}
{{- end }}
{{- $_ := set $cfg "targets" (list (dict "name" "vllm" "url" (printf "http://127.0.0.1:%d/metrics" (int .Values.sidecar.vllmPort)))) }}
{{- end }}
{{- if .Values.prometheus.bearerTokenSecret.name }}
{{- if ne .Values.mode "prometheus" }}
{{- fail "prometheus.bearerTokenSecret is the token for config.prometheus.url: it needs mode=prometheus" }}
{{- end }}
{{- /* A copy: .Values must stay as given (this template renders more than once). */}}
{{- $query := deepCopy .Values.config.prometheus }}
{{- if $query.bearer_token_file }}
{{- fail "set prometheus.bearerTokenSecret or config.prometheus.bearer_token_file, not both" }}
{{- end }}
{{- range $name, $_ := $query.headers | default dict }}
{{- if eq (lower $name) "authorization" }}
{{- fail "set prometheus.bearerTokenSecret or config.prometheus.headers.Authorization, not both" }}
{{- end }}
{{- end }}
{{- $_ := set $query "bearer_token_file" (include "specwatch.prometheusTokenPath" .) }}
{{- $_ := set $cfg "prometheus" $query }}
{{- end }}
{{- /* The alert rules' window goes to the sidecar through its config (alerting.window), so it warns
when the window is not exported; prometheusRule.alertWindow is the one chart value for it. */}}
{{- $alertWindow := include "specwatch.alertWindow" . }}
{{- $alerting := deepCopy (.Values.config.alerting | default dict) }}
{{- if and (hasKey $alerting "window") (ne (toString $alerting.window) $alertWindow) }}
{{- fail (printf "config.alerting.window=%v differs from prometheusRule.alertWindow=%s: set only prometheusRule.alertWindow (the chart writes it into config.alerting.window)" $alerting.window $alertWindow) }}
{{- end }}
{{- $_ := set $alerting "window" $alertWindow }}
{{- $_ := set $cfg "alerting" $alerting }}
{{- /* The drain after SIGTERM ends before the pod's grace period (specwatch.shutdownDrain). */}}
{{- $drain := include "specwatch.shutdownDrain" . }}
{{- if or (eq .Values.mode "sidecar") (hasKey .Values.config "shutdown_drain") }}
{{- $_ := set $cfg "shutdown_drain" $drain }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
A specwatch duration ("500ms", "30s", "5m", "1h", or a number of seconds; the values schema checks
the pattern) as a number of seconds.
*/}}
{{- define "specwatch.seconds" -}}
{{- $s := trim (toString .) }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $s }}
{{- $unit := trim (trimPrefix $number $s) }}
{{- $scale := dict "" 1.0 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- if not (and $number (hasKey $scale $unit)) }}
{{- fail (printf "config.shutdown_drain=%v is not a duration such as 20s" .) }}
{{- end }}
{{- printf "%g" (mulf (float64 $number) (get $scale $unit)) }}
{{- end }}

{{/*
config.shutdown_drain as rendered: the most the sidecar keeps polling after SIGTERM while vLLM still
answers with metrics (it exits at vLLM's first refused connection or non-metrics answer). The kubelet
SIGKILLs the pod's containers terminationGracePeriodSeconds after SIGTERM, and the sidecar needs a
few seconds to stop after the cap, so the cap ends 5 s before the grace period: derived as
terminationGracePeriodSeconds - 5 (at least 0s) when not set, and a set value that does not end that
early fails the render. In sidecar mode terminationGracePeriodSeconds must be the vLLM pod's.
*/}}
{{- define "specwatch.shutdownDrain" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $cap := max 0 (sub $grace 5) }}
{{- if hasKey .Values.config "shutdown_drain" }}
{{- $given := .Values.config.shutdown_drain }}
{{- if gt (float64 (include "specwatch.seconds" $given)) (float64 $cap) }}
{{- fail (printf "config.shutdown_drain=%v does not end 5s before terminationGracePeriodSeconds=%d (the kubelet SIGKILLs the pod then): set it to at most %ds, or leave it unset to derive it, and set terminationGracePeriodSeconds to the vLLM pod's grace period" $given $grace $cap) }}
{{- end }}
{{- toString $given }}
{{- else }}
{{- printf "%ds" $cap }}
{{- end }}
{{- end }}

{{/* The window every alert reads (rules/ read window="5m"). */}}
{{- define "specwatch.alertWindow" -}}
{{- .Values.prometheusRule.alertWindow | default "5m" | toString }}
{{- end }}

{{/*
Annotation value that changes whenever the config changes. Only this chart's own Deployment
(standalone and prometheus modes) carries it: a vLLM pod never does, since rolling it would reload model weights on
every replica for a config change that `specwatch run` applies in place (file change or SIGHUP).
*/}}
{{- define "specwatch.configChecksum" -}}
{{- include "specwatch.configYaml" . | sha256sum }}
{{- end }}

{{/*
The specwatch container as a single mapping. Used by this chart's Deployment (standalone and prometheus modes) and,
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
{{- if and $sidecar .Values.sidecar.native }}
{{- /* A native sidecar (Kubernetes >= 1.29): an init container that keeps running, started before and
       stopped after the pod's containers. Valid only under initContainers. */}}
restartPolicy: Always
{{- end }}
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
  {{- if include "specwatch.sharded" . }}
  # The shard index is the StatefulSet pod's ordinal, read from its name (name-<ordinal>).
  - name: SPECWATCH_POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: SPECWATCH_PROMETHEUS__SHARD
    value: {{ printf "$(SPECWATCH_POD_NAME)/%d" (int .Values.fleet.shards) | quote }}
  {{- end }}
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
{{- $liveness := .Values.livenessProbe.enabled }}
{{- if kindIs "invalid" $liveness }}{{ $liveness = not $sidecar }}{{ end }}
{{- if $liveness }}
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
  {{- toYaml (include "specwatch.resources" . | fromYaml) | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: specwatch-config
    mountPath: /etc/specwatch
    readOnly: true
  - name: specwatch-tmp
    mountPath: /tmp
  {{- if and (eq .Values.mode "prometheus") .Values.prometheus.bearerTokenSecret.name }}
  - name: prometheus-token
    mountPath: {{ include "specwatch.prometheusTokenDir" . }}
    readOnly: true
  {{- end }}
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
{{- /* extraContainers go to the pod's containers, where restartPolicy is refused. */}}
{{- $_ := unset $c "restartPolicy" }}
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
{{- /* No config file here: the alert window comes through its variable. */}}
{{- $env = append $env (dict "name" "SPECWATCH_ALERTING__WINDOW" "value" (include "specwatch.alertWindow" .)) }}
{{- /* ... and the drain's cap, below the grace period, through its own. */}}
{{- $env = append $env (dict "name" "SPECWATCH_SHUTDOWN_DRAIN" "value" (include "specwatch.shutdownDrain" .)) }}
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
{{- with .Values.prometheus.bearerTokenSecret }}
{{- if and (eq $.Values.mode "prometheus") .name }}
- name: prometheus-token
  secret:
    secretName: {{ .name }}
    items:
      - key: {{ .key | default "token" }}
        path: token
    # Readable by the pod's fsGroup (the exporter's group), by no one else.
    defaultMode: 0440
{{- end }}
{{- end }}
{{- end }}

{{/*
The complete strategic-merge patch for the vLLM Deployment (NOTES prints it; the kustomize Component
and the post-renderer ship it for release "specwatch" with the default values):
- metadata.name: kustomize needs one and ignores it when the patch has a `target`; `kubectl patch`
  needs the Deployment's own name (sidecar.vllmDeployment).
- the vLLM container is named first in `containers` with nothing but its name: a strategic merge puts
  a container that is new to the list ahead of the existing ones, so listing vLLM first keeps it first
  (and the default of `kubectl logs` / `exec`), and merging a bare name changes nothing in it. The
  default-container annotation says the same to kubectl. Both are static: a config change never
  changes the pod template.
- sidecar.native puts specwatch in initContainers (restartPolicy: Always) and leaves containers alone.
- canary.enabled adds the Deployment annotation that asks the post-renderer for a spec-off canary
  (specwatch.canaryRequest); the Deployment's metadata, not its pod template: it rolls no pod.
*/}}
{{- define "specwatch.sidecarPatch" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Values.sidecar.vllmDeployment | default "vllm-deployment" }}
  {{- if .Values.canary.enabled }}
  annotations:
    {{- include "specwatch.canaryRequest" . | nindent 4 }}
  {{- end }}
spec:
  template:
    metadata:
      annotations:
        kubectl.kubernetes.io/default-container: {{ .Values.sidecar.vllmContainerName }}
    spec:
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if .Values.sidecar.native }}
      initContainers:
        - {{ include "specwatch.sidecarContainer" . | indent 10 | trim }}
      {{- else }}
      containers:
        - name: {{ .Values.sidecar.vllmContainerName }}
        - {{ include "specwatch.sidecarContainer" . | indent 10 | trim }}
      {{- end }}
      volumes:
        {{- include "specwatch.sidecarVolumes" . | nindent 8 }}
{{- end }}

{{/*
A resource quantity as a plain number, so "200m" equals "0.2" and "128Mi" equals "134217728"
(requests and limits that Kubernetes reads as equal must compare equal here).
*/}}
{{- define "specwatch.quantity" -}}
{{- $s := toString . }}
{{- $number := regexFind "^[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?" $s }}
{{- $suffix := trimPrefix $number $s }}
{{- $scale := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 }}
{{- if and $number (hasKey $scale $suffix) }}
{{- printf "%.12g" (mulf (float64 $number) (get $scale $suffix)) }}
{{- else }}
{{- $s }}
{{- end }}
{{- end }}

{{/*
Sidecar mode: the container must not change the vLLM pod's QoS class. A pod is Guaranteed only when
every container has cpu and memory limits and requests equal to them (a missing request defaults to
the limit), so anything else turns a Guaranteed vLLM pod Burstable and costs its integer-CPU container
its exclusive cores under the static CPU manager.
*/}}
{{- define "specwatch.validateGuaranteed" -}}
{{- if and (eq .Values.mode "sidecar") (not .Values.sidecar.allowNonGuaranteedResources) }}
{{- $limits := (.Values.resources | default dict).limits | default dict }}
{{- $requests := (.Values.resources | default dict).requests | default dict }}
{{- range $key := list "cpu" "memory" }}
{{- if not (index $limits $key) }}
{{- fail (printf "resources.limits.%s is not set: in sidecar mode a container without cpu and memory limits turns a Guaranteed vLLM pod Burstable (it loses its exclusive CPUs). Set resources.requests == resources.limits for cpu and memory, or sidecar.allowNonGuaranteedResources=true if the vLLM pod is not Guaranteed anyway" $key) }}
{{- end }}
{{- if and (index $requests $key) (ne (include "specwatch.quantity" (index $requests $key)) (include "specwatch.quantity" (index $limits $key))) }}
{{- fail (printf "resources.requests.%s=%v differs from resources.limits.%s=%v: in sidecar mode that turns a Guaranteed vLLM pod Burstable (it loses its exclusive CPUs). Set them equal, or sidecar.allowNonGuaranteedResources=true if the vLLM pod is not Guaranteed anyway" $key (index $requests $key) $key (index $limits $key)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Checks that depend on more than one value (the schema checks single values). */}}
{{- define "specwatch.validate" -}}
{{- include "specwatch.validateGuaranteed" . }}
{{- $windows := .Values.config.windows | default (list "1m" "5m") }}
{{- $alertWindow := include "specwatch.alertWindow" . }}
{{- if and .Values.prometheusRule.enabled (not (has $alertWindow $windows)) }}
{{- fail (printf "prometheusRule.alertWindow=%s is not one of config.windows %v: the alerts read window=%q, which the sidecar would never export, so they could never fire" $alertWindow $windows $alertWindow) }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.serviceMonitor.enabled }}
{{- fail "serviceMonitor needs mode=standalone or mode=prometheus (sidecar mode has no Service): use podMonitor.enabled=true with podMonitor.selectorOverride set to the vLLM pods' labels" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.podMonitor.enabled (empty .Values.podMonitor.selectorOverride) }}
{{- fail "podMonitor.selectorOverride is required in sidecar mode: the labels of the vLLM pods that carry the specwatch container (an empty selector would scrape every pod)" }}
{{- end }}
{{- if and .Values.canary.enabled (eq .Values.mode "standalone") }}
{{- fail "canary.enabled needs mode=sidecar or mode=prometheus: the canary is rendered with the vLLM release by the post-renderer from the patch NOTES prints, and standalone mode polls only the URLs in config.targets (add the canary pod's URL there instead)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.networkPolicy.enabled }}
{{- fail "networkPolicy needs mode=standalone or mode=prometheus: in sidecar mode a NetworkPolicy selects the whole vLLM pod and would cut its serving traffic; allow the specwatch port in the vLLM chart's own policy instead" }}
{{- end }}
{{- end }}

{{/*
The container's resources: `resources`, except in fleet mode, where memory follows the fleet's size
(64 MiB + 64 KiB per expected replica for the polls, docs/fleet.md, + 192 KiB per expected replica
for the history read at start, fleet/history.py HISTORY_BYTES_PER_REPLICA, docs/kubernetes.md)
unless prometheus.resources is set. With config.prometheus.recorded: true every read (polls, history,
canary baselines, rollout grading) is per route aggregate, so prometheus.expectedRoutes counts in
place of the replicas (the same 64 + 192 KiB each: an aggregate's series are a replica's).
*/}}
{{- define "specwatch.resources" -}}
{{- if and (eq .Values.mode "prometheus") (not .Values.prometheus.resources) }}
{{- $historyKib := 192 }}
{{- $recorded := eq (toString ((.Values.config.prometheus | default dict).recorded)) "true" }}
{{- $count := ternary (int (.Values.prometheus.expectedRoutes | default 100)) (int .Values.prometheus.expectedReplicas) $recorded }}
{{- $mib := add 64 (div (add (mul (add 64 $historyKib) $count) 1023) 1024) }}
{{- $cpu := .Values.resources.limits.cpu | default "200m" }}
requests:
  cpu: {{ $cpu | quote }}
  memory: {{ printf "%dMi" $mib | quote }}
limits:
  cpu: {{ $cpu | quote }}
  memory: {{ printf "%dMi" $mib | quote }}
{{- else if and (eq .Values.mode "prometheus") .Values.prometheus.resources }}
{{- toYaml .Values.prometheus.resources }}
{{- else }}
{{- toYaml .Values.resources }}
{{- end }}
{{- end }}

{{- /* A Prometheus duration of one unit (500ms, 10s, 1m, 2h) in seconds, for comparing two of them. */}}
{{- define "specwatch.durationSeconds" -}}
{{- $d := toString . }}
{{- $n := regexFind "^[0-9.]+" $d | float64 }}
{{- $unit := regexReplaceAll "^[0-9.]+" $d "" }}
{{- $scale := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- mulf $n (get $scale $unit | default 1.0) }}
{{- end }}

{{- /* scrapeTimeout no longer than interval: Prometheus refuses a timeout above the scrape interval. */}}
{{- define "specwatch.scrapeTimeout" -}}
{{- $monitor := . }}
{{- $timeout := $monitor.scrapeTimeout }}
{{- if and $timeout $monitor.interval }}
{{- if gt (include "specwatch.durationSeconds" $timeout | float64) (include "specwatch.durationSeconds" $monitor.interval | float64) }}
{{- $timeout = $monitor.interval }}
{{- end }}
{{- end }}
{{- $timeout }}
{{- end }}

{{/*
The annotation by which a patch asks the post-renderer (helm/specwatch/post-renderer) for a
one-replica spec-off canary of each Deployment it patches: a Deployment can only be copied where it
is rendered (the vLLM release), so canary.enabled travels in the patch.
*/}}
{{- define "specwatch.canaryRequest" -}}
specwatch.dev/canary-requested: spec-off
{{- end }}

{{/*
Prometheus mode adds nothing to the vLLM pods: its patch for canary.enabled holds the request alone.
*/}}
{{- define "specwatch.canaryPatch" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Values.sidecar.vllmDeployment | default "vllm-deployment" }}
  annotations:
    {{- include "specwatch.canaryRequest" . | nindent 4 }}
{{- end }}

{{/*
NOTES: how to apply the canary patch (its markers' word: "sidecar" or "canary") with the vLLM release.
  include "specwatch.canaryNotes" (list . "sidecar")
*/}}
{{- define "specwatch.canaryNotes" -}}
{{- $ := index . 0 }}
{{- $what := index . 1 }}
{{- $ns := include "specwatch.namespace" $ -}}
Spec-off canary (canary.enabled): the patch carries the annotation {{ include "specwatch.canaryRequest" $ }}, which
asks the post-renderer for a copy of each vLLM Deployment it patches (kubectl patch cannot copy one):

  helm get notes {{ $.Release.Name }} -n {{ $.Release.Namespace }} \
    | sed -n '/^# --- specwatch {{ $what }} patch begin/,/^# --- specwatch {{ $what }} patch end/p' > specwatch-patch.yaml
  helm upgrade <vllm release> <vllm chart> -n {{ $ns }} --reuse-values \
    --post-renderer ./helm/specwatch/post-renderer/specwatch-post-renderer \
    --post-renderer-args --patch=$PWD/specwatch-patch.yaml
  # Helm 4: helm plugin install ./helm/specwatch/post-renderer, then --post-renderer specwatch
  # kustomize: kubectl kustomize <overlay> \
  #   | ./helm/specwatch/post-renderer/specwatch-post-renderer --patch=specwatch-patch.yaml | kubectl apply -f -

It adds <vLLM Deployment>-spec-off-canary: 1 replica, --speculative-config removed, no specwatch sidecar,
label specwatch.dev/canary=spec-off on the Deployment, its selector and its pods (which keep the vLLM
labels, so the vLLM Service sends them their share of traffic). Fleet mode (mode=prometheus) counts
every spec-off replica of a route as its canary{{ with ($.Values.config.prometheus | default dict).canary }} (here only those matching {{ toJson . }}){{ end }}.
Run it for the measurement's minutes (GET /api/v1/status: routes[].windows[w].measurement), then set
canary.enabled=false and run the same two commands: Helm removes the canary with the vLLM release's
next manifest (after kubectl apply: kubectl -n {{ $ns }} delete deployment -l specwatch.dev/canary=spec-off).
{{- end }}
