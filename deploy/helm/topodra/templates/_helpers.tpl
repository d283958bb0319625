{{/* Labels of every object of driver `kind` (cpu | accelerator | nic). Call with (dict "kind" ...). */}}
{{- define "topodra.driverLabels" -}}
app.kubernetes.io/name: topodra-{{ .kind }}-driver
app.kubernetes.io/part-of: topodra
{{- end }}

{{- define "topodra.podLabels" -}}
app.kubernetes.io/name: topodra-{{ .kind }}-driver
app.kubernetes.io/component: kubelet-plugin
app.kubernetes.io/part-of: topodra
{{- end }}

{{/* The labels Helm's conventions put on every object (app.kubernetes.io/* and helm.sh/chart);
kustomize's objects have the others only, so tests/deploy compares them without these. */}}
{{- define "topodra.releaseLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* image.tag defaults to the chart's appVersion: the chart and the image move together. */}}
{{- define "topodra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The unprivileged container securityContext of the cpu and accelerator drivers and the init container. */}}
{{- define "topodra.rootNoCaps" -}}
runAsUser: 0
runAsGroup: 0
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Env every driver container gets; call with the root context. */}}
{{- define "topodra.env" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
# glibc gives each thread that allocates its own malloc arena (up to 8 per CPU); two keep the
# gRPC and claim threads from growing the RSS under load (hack/bench-peer).
- name: MALLOC_ARENA_MAX
  value: "2"
# Docstrings are dropped from the loaded code (-OO; the image carries that bytecode): serve cpu
# 39.4 -> 38.3 MiB RSS (hack/bench-peer). Asserts go too; none is a check.
- name: PYTHONOPTIMIZE
  value: "2"
{{- end }}

{{/* Common serve flags; call with (dict "root" $ "port" N). */}}
{{- define "topodra.commonArgs" -}}
- --kubelet-root-dir={{ .root.Values.kubeletRootDir }}
- --cdi-root={{ .root.Values.cdiRoot }}
- --metrics-address={{ .host | default "" }}:{{ .port }}
- --log-level={{ .root.Values.logLevel }}
{{- end }}

{{- define "topodra.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}

{{/* Pod-level settings of every driver; call with the root context. */}}
{{- define "topodra.podCommon" -}}
priorityClassName: {{ .Values.priorityClassName }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Volumes of the kubelet's folders for driver `kind`; call with (dict "root" $ "kind" ...). */}}
{{- define "topodra.kubeletMounts" -}}
- name: plugins-registry
  mountPath: {{ .root.Values.kubeletRootDir }}/plugins_registry
- name: plugin-dir
  mountPath: {{ .root.Values.kubeletRootDir }}/plugins/{{ .kind }}.topodra.io
# the kubelet's pod resources socket: which containers use a claim reconcile would release
- name: pod-resources
  mountPath: {{ .root.Values.kubeletRootDir }}/pod-resources
  readOnly: true
- name: cdi
  mountPath: {{ .root.Values.cdiRoot }}
- name: sys
  mountPath: /sys
  readOnly: true
{{- end }}

{{- define "topodra.kubeletVolumes" -}}
- name: plugins-registry
  hostPath:
    path: {{ .root.Values.kubeletRootDir }}/plugins_registry
    type: DirectoryOrCreate
- name: plugin-dir
  hostPath:
    path: {{ .root.Values.kubeletRootDir }}/plugins/{{ .kind }}.topodra.io
    type: DirectoryOrCreate
- name: pod-resources
  hostPath:
    path: {{ .root.Values.kubeletRootDir }}/pod-resources
    type: DirectoryOrCreate
- name: cdi
  hostPath:
    path: {{ .root.Values.cdiRoot }}
    type: DirectoryOrCreate
- name: sys
  hostPath:
    path: /sys
    type: Directory
{{- end }}

{{- define "topodra.installHooks" -}}
- name: install-hooks
  image: {{ include "topodra.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  args: ["install-hooks", "--driver={{ .kind }}", "--dest={{ .root.Values.hookDir }}"]
  securityContext:
    {{- include "topodra.rootNoCaps" . | nindent 4 }}
  resources:
    requests:
      cpu: 10m
      memory: 32Mi
    limits:
      memory: 64Mi
  volumeMounts:
    - name: hooks
      mountPath: {{ .root.Values.hookDir }}
{{- end }}

{{/* Labels of the node check's objects (deploy/base/check.yaml). */}}
{{- define "topodra.checkLabels" -}}
app.kubernetes.io/name: topodra-check
app.kubernetes.io/part-of: topodra
{{- end }}

{{- define "topodra.checkPodLabels" -}}
app.kubernetes.io/name: topodra-check
app.kubernetes.io/component: node-check
app.kubernetes.io/part-of: topodra
{{- end }}
