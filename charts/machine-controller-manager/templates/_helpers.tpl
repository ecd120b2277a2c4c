{{/* Names, labels and images shared by the templates. */}}

{{- define "mcm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource-name prefix: <release>-<chart>, or the release name when it holds the chart name. */}}
{{- define "mcm.fullname" -}}
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

{{/* Name of the manager Deployment, PDB and metrics Service (not prefixed by default: the
cluster-autoscaler looks for the Deployment machine-controller-manager in its namespace). */}}
{{- define "mcm.managerName" -}}
{{- default (include "mcm.fullname" .) .Values.manager.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether the provider sidecar is a gRPC driver (the manager runs every controller). */}}
{{- define "mcm.driverMode" -}}
{{- if eq .Values.provider.mode "driver" }}true{{ end }}
{{- end }}

{{- define "mcm.providerContainer" -}}
{{- default (printf "provider-%s" .Values.provider.name) .Values.provider.containerName }}
{{- end }}

{{- define "mcm.webhookName" -}}
{{- printf "%s-webhook" (include "mcm.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "mcm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include "mcm.selectorLabels" (list . "manager"). */}}
{{- define "mcm.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "mcm.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "mcm.componentLabels" -}}
{{- $root := index . 0 -}}
{{ include "mcm.labels" $root }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "mcm.controlNamespace" -}}
{{- default .Release.Namespace .Values.manager.controlNamespace }}
{{- end }}

{{- define "mcm.managerServiceAccount" -}}
{{- default (include "mcm.fullname" .) .Values.manager.serviceAccount.name }}
{{- end }}

{{- define "mcm.webhookServiceAccount" -}}
{{- default (include "mcm.webhookName" .) .Values.webhook.serviceAccount.name }}
{{- end }}

{{- define "mcm.webhookSecret" -}}
{{- if eq .Values.webhook.certificates.mode "self-managed" }}
{{- default (printf "%s-certs" (include "mcm.webhookName" .)) .Values.webhook.certificates.selfManaged.secretName }}
{{- else }}
{{- printf "%s-tls" (include "mcm.webhookName" .) }}
{{- end }}
{{- end }}

{{- define "mcm.webhookLease" -}}
{{- default (printf "%s-certs" (include "mcm.webhookName" .)) .Values.webhook.certificates.selfManaged.leaseName }}
{{- end }}

{{/* Name of the cert-manager serving Certificate (inject-ca-from points at it). */}}
{{- define "mcm.servingCertificate" -}}
{{- printf "%s-serving" (include "mcm.webhookName" .) }}
{{- end }}

{{/* Image reference: include "mcm.image" (list $root $image) for manager/webhook images. */}}
{{- define "mcm.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $repository := printf "%s/%s" $root.Values.image.registry $image.name -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default (default $root.Chart.AppVersion $root.Values.image.tag) $image.tag) -}}
{{- end -}}
{{- end }}

{{- define "mcm.providerImage" -}}
{{- $image := .Values.provider.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default (default .Chart.AppVersion .Values.image.tag) $image.tag) -}}
{{- end -}}
{{- end }}

{{/* The plurals of the four kinds, as the CRDs and webhook rules name them. */}}
{{- define "mcm.kinds" -}}
machine: machines
machineset: machinesets
machinedeployment: machinedeployments
machineclass: machineclasses
{{- end }}

{{/* Fields shared by every admission webhook: include "mcm.webhookCommon" (list $root $path $plural). */}}
{{- define "mcm.webhookCommon" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $plural := index . 2 -}}
admissionReviewVersions: [v1]
sideEffects: None
timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  # caBundle is injected (cert-manager's cainjector or the self-managed webhook) and never
  # rendered, so upgrades leave the injected value alone.
  service:
    name: {{ include "mcm.webhookName" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ $path }}
    port: {{ $root.Values.webhook.servicePort }}
rules:
  - apiGroups: [machine.sapcloud.io]
    apiVersions: ["*"]
    operations: [CREATE, UPDATE]
    resources: [{{ $plural }}]
    scope: Namespaced
namespaceSelector:
  {{- toYaml $root.Values.webhook.namespaceSelector | nindent 2 }}
objectSelector:
  {{- toYaml $root.Values.webhook.objectSelector | nindent 2 }}
{{- if $root.Values.webhook.excludeTerminating }}
matchConditions:
  # Updates of objects being deleted (finalizer removal) never depend on the webhook.
  - name: exclude-terminating
    expression: "!has(object.metadata.deletionTimestamp)"
{{- end }}
{{- end }}

{{/* Whether the target RBAC gets the virtual provider's kubelet rules. */}}
{{- define "mcm.virtualKubelet" -}}
{{- if kindIs "invalid" .Values.target.rbac.virtualKubelet }}
{{- if eq .Values.provider.name "virtual" }}true{{ end }}
{{- else if .Values.target.rbac.virtualKubelet }}true{{ end }}
{{- end }}

{{/* Fails the render on contradictory values, with a message that says what to change. */}}
{{- define "mcm.validate" -}}
{{- $mode := .Values.manager.targetKubeconfig.mode }}
{{- if not (has $mode (list "inCluster" "secret" "none")) }}
{{- fail (printf "manager.targetKubeconfig.mode %q: use inCluster, secret or none" $mode) }}
{{- end }}
{{- if and (eq $mode "secret") (not .Values.manager.targetKubeconfig.secretName) }}
{{- fail "manager.targetKubeconfig.mode=secret needs manager.targetKubeconfig.secretName" }}
{{- end }}
{{- if not (has .Values.webhook.certificates.mode (list "cert-manager" "self-managed")) }}
{{- fail (printf "webhook.certificates.mode %q: use cert-manager or self-managed" .Values.webhook.certificates.mode) }}
{{- end }}
{{- if and .Values.conversion.enabled (not .Values.crds.install) }}
{{- fail "conversion.enabled needs crds.install: the conversion stanza lives in the CRDs (their owner must set it)" }}
{{- end }}
{{- if and .Values.conversion.enabled (not .Values.webhook.enabled) }}
{{- fail "conversion.enabled needs webhook.enabled: the webhook serves /convert" }}
{{- end }}
{{- if not (has .Values.provider.mode (list "driver" "machine-controller")) }}
{{- fail (printf "provider.mode %q: use driver or machine-controller" .Values.provider.mode) }}
{{- end }}
{{- if eq .Values.provider.mode "machine-controller" }}
{{- if kindIs "invalid" .Values.provider.args }}
{{- fail "provider.mode=machine-controller needs provider.args (the flags of the provider's machine-controller)" }}
{{- end }}
{{- if not (or .Values.provider.image.tag .Values.provider.image.digest) }}
{{- fail "provider.mode=machine-controller needs provider.image.tag or provider.image.digest (the chart's appVersion is no provider release)" }}
{{- end }}
{{- end }}
{{- $ports := list (int .Values.manager.port) (int .Values.provider.metricsPort) }}
{{- if eq .Values.provider.mode "driver" }}
{{- $ports = append $ports (int .Values.manager.machineMetricsPort) }}
{{- end }}
{{- if ne (len $ports) (len (uniq $ports)) }}
{{- fail (printf "ports %v share one pod and must differ: manager.port, provider.metricsPort and (provider.mode=driver) manager.machineMetricsPort" $ports) }}
{{- end }}
{{- if not (has .Values.webhook.podAntiAffinity (list "soft" "hard")) }}
{{- fail (printf "webhook.podAntiAffinity %q: use soft or hard" .Values.webhook.podAntiAffinity) }}
{{- end }}
{{- end }}
