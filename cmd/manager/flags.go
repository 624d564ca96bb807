package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencedlease/fencedlease/controllers/fencedlease"
	"github.com/fencedlease/fencedlease/internal/certs"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/endpoint"
	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
)

type flags struct {
	metricsAddr, probeAddr     string
	pprofAddr                  string
	metricsCertDir             string
	namespace                  string
	leaderElect                bool
	leaderElectionNamespace    string
	webhookHost                string
	webhookPort                int
	webhookCertDir             string
	enableHTTP2, secureMetrics bool
	enableWebhooks             bool
	webhook                    setup.WebhookOptions
	workers                    int
	statusRenewalInterval      time.Duration
	cacheWholePods             bool
	tokenSecret                string
	scaleGuardRole             string
	scaleGuardAccount          string
	certs                      certs.Options
	heartbeat                  fencedlease.Heartbeat
}

// registerFlags defines the manager's flags on fs, into f and opts
// (docs/manager-flags.md lists them; TestFlagsReference keeps it current).
func registerFlags(fs *flag.FlagSet, f *flags, opts *zap.Options) {
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint (HTTPS); \"0\" turns it off.")
	fs.BoolVar(&f.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS and let only callers that the API server authenticates (TokenReview) and authorizes for get on /metrics (SubjectAccessReview) read them. false serves plain HTTP to anyone: for a run on a workstation only.")
	fs.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint; empty: a self-signed certificate generated at start.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "Address of Go's profiles (/debug/pprof/, plain HTTP, no authentication: bind it to localhost); \"0\" turns them off, the default.")
	fs.StringVar(&f.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The operator's namespace: where its certificate Secret and leader election Lease are. Defaults to $POD_NAMESPACE.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect one active controller among the replicas. Correctness does not depend on it: every grant is a compare-and-swap.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to --namespace, else to the namespace the operator runs in.")
	fs.StringVar(&f.webhookHost, "webhook-host", "", "Address the admission webhook server listens on; empty means every address.")
	fs.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the admission webhook server.")
	fs.StringVar(&f.webhookCertDir, "webhook-cert-dir", "", "Directory with tls.crt and tls.key for the webhook server; defaults to controller-runtime's. With --webhook-cert-secret the operator writes them there.")
	fs.StringVar(&f.certs.SecretName, "webhook-cert-secret", "", "Secret in --namespace holding the webhook server's certificate (tls.crt, tls.key, ca.crt). When set, every replica loads the certificate from it and is Ready only when the webhook configurations' CA bundles trust it.")
	fs.BoolVar(&f.certs.Rotate, "webhook-cert-rotation", true, "With --webhook-cert-secret: provision and rotate the certificate in that Secret and inject its CA into the webhook configurations. Turn off when cert-manager issues it.")
	fs.StringVar(&f.certs.ServiceName, "webhook-service", "", "Service in --namespace through which the API server calls the webhooks; the certificate is issued for <service>.<namespace>.svc.")
	fs.Func("webhook-cert-extra-dns-name", "Another DNS name for the self-provisioned certificate (repeatable), e.g. localhost when the API server calls the webhooks by URL.", appendTo(&f.certs.ExtraDNSNames))
	fs.Func("validating-webhook-configuration", "ValidatingWebhookConfiguration that calls this webhook server (repeatable): its CA bundle must trust the certificate, and is kept current with --webhook-cert-rotation.", appendTo(&f.certs.ValidatingWebhookConfigurations))
	fs.Func("mutating-webhook-configuration", "MutatingWebhookConfiguration that calls this webhook server (repeatable); as --validating-webhook-configuration.", appendTo(&f.certs.MutatingWebhookConfigurations))
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "Serve the webhook and metrics over HTTP/2 as well (off because of HTTP/2 rapid-reset attacks).")
	fs.BoolVar(&f.enableWebhooks, "enable-webhooks", true, "Serve the admission webhooks (fencing of protected objects, token injection into pods).")
	fs.IntVar(&f.workers, "concurrent-reconciles", fencedlease.DefaultWorkers, "How many FencedLeases are reconciled at once. Renewals always go first, whatever the load.")
	fs.DurationVar(&f.statusRenewalInterval, "status-renewal-interval", fencedlease.DefaultStatusRenewalInterval,
		"How often, at most, a renewal that changes nothing else is recorded in a FencedLease's status (renewTime, expireTime); the Lease records every renewal. 0 records every one, at the API server's cost. While the operator stretches renewals under load, at most every 5m whatever this is.")
	fs.BoolVar(&f.cacheWholePods, "cache-whole-pods", false, "Cache whole pods instead of only the fields the operator reads (costs memory; for comparison).")
	fs.StringVar(&f.tokenSecret, "webhook-token-secret", "",
		"Secret (namespace/name) that keeps the random token in the webhooks' paths; created if missing. The webhooks are served only under <path>/<token>. Defaults to "+setup.DefaultTokenSecret+" in --namespace.")
	fs.StringVar(&f.webhook.FencingConfiguration, "fencing-webhook-configuration", setup.DefaultFencingConfiguration,
		"ValidatingWebhookConfiguration of the fencing webhook: its path gets the token, and FencedLeases in namespaces it does not cover report Degraded (ProtectionUnavailable).")
	fs.StringVar(&f.webhook.PodConfiguration, "pod-webhook-configuration", setup.DefaultPodConfiguration,
		"MutatingWebhookConfiguration of the pod webhook: its path gets the token.")
	fs.Int64Var(&f.webhook.MaxRequestBytes, "webhook-max-request-bytes", endpoint.DefaultMaxRequestBytes,
		"Largest admission request body the webhooks read; larger ones are refused unread.")
	fs.StringVar(&f.scaleGuardRole, "scale-guard-role", "",
		"ClusterRole whose rules name the protected objects whose scale writes the fencing webhook decides (the scale guard); the operator keeps it. Empty: no guard, and the scale webhook is called for every scale write of the resources it lists.")
	fs.StringVar(&f.scaleGuardAccount, "scale-guard-service-account", "",
		"ServiceAccount (namespace/name) bound to --scale-guard-role, which the scale webhook's matchCondition asks the authorizer about; it runs nothing.")
	fs.Func("operator-user", "User name the operator authenticates as (repeatable), e.g. system:serviceaccount:fencedlease-system:fencedlease-controller-manager; it may write protected objects.", appendTo(&f.webhook.OperatorUsers))
	fs.Func("break-glass-user", "User allowed to write protected objects without a token (repeatable); every such write is logged, recorded as an Event and counted.", appendTo(&f.webhook.BreakGlassUsers))
	fs.Func("break-glass-group", "Group allowed to write protected objects without a token (repeatable); audited like --break-glass-user.", appendTo(&f.webhook.BreakGlassGroups))
	fs.DurationVar(&f.heartbeat.Interval, "heartbeat-interval", fencedlease.DefaultHeartbeatInterval,
		"How often the operator renews its heartbeat Lease, which renews every grant of renewal Operator whose lease duration is at least four intervals; 0 renews each grant on its own Lease instead (design.md, \"A quiet lease\").")
	fs.DurationVar(&f.heartbeat.Refresh, "heartbeat-refresh", fencedlease.DefaultHeartbeatRefresh,
		"How often the Lease of a grant the heartbeat renews is written all the same, so that it says the grant is alive to a reader of that Lease alone.")
	fs.StringVar(&f.heartbeat.Name, "heartbeat-name", fencedlease.DefaultHeartbeatName, "Name of the heartbeat Lease, in --namespace.")
	opts.BindFlags(fs)
}

func parseFlags() (flags, zap.Options) {
	var f flags
	opts := zap.Options{}
	registerFlags(flag.CommandLine, &f, &opts)
	flag.Parse()
	if f.leaderElectionNamespace == "" {
		f.leaderElectionNamespace = f.namespace
	}
	if f.namespace == "" {
		f.namespace = setup.DefaultNamespace
	}
	f.certs.Namespace = f.namespace
	f.heartbeat.Namespace = f.namespace
	f.heartbeat.Identity, _ = os.Hostname()
	if f.tokenSecret == "" {
		f.tokenSecret = f.namespace + "/" + setup.DefaultTokenSecret
	}
	return f, opts
}

// parseSecret parses namespace/name.
func parseSecret(v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--webhook-token-secret=%q: want namespace/name", v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// scaleGuard is the guard of the two flags, nil when neither is set.
func scaleGuard(role, account string) (*scaleguard.Guard, error) {
	if role == "" && account == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(account, "/")
	if role == "" || !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--scale-guard-role=%q --scale-guard-service-account=%q: want both, the second as namespace/name", role, account)
	}
	return &scaleguard.Guard{Role: role, SANamespace: ns, SAName: name}, nil
}

func appendTo(list *[]string) func(string) error {
	return func(v string) error {
		*list = append(*list, v)
		return nil
	}
}

// checkFlags checks what the flag package cannot and fills in f.webhook
// the values it parses.
func checkFlags(f *flags) error {
	var err error
	if f.webhook.TokenSecret, err = parseSecret(f.tokenSecret); err != nil {
		return err
	}
	if f.webhook.ScaleGuard, err = scaleGuard(f.scaleGuardRole, f.scaleGuardAccount); err != nil {
		return err
	}
	if f.statusRenewalInterval < 0 {
		return fmt.Errorf("--status-renewal-interval=%s: want 0 or more", f.statusRenewalInterval)
	}
	return nil
}
