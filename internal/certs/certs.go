package certs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// File names in the Secret and in the certificate directory: those of a
// kubernetes.io/tls Secret, which both cert-controller and cert-manager write.
const (
	CertName = corev1.TLSCertKey
	KeyName  = corev1.TLSPrivateKeyKey
	CAName   = "ca.crt"
)

// Options say where the certificate lives and who must trust it.
type Options struct {
	// Namespace is the operator's namespace, where the Secret is.
	Namespace string
	// SecretName is the Secret that holds tls.crt, tls.key and ca.crt.
	SecretName string
	// ServiceName is the webhook Service: the certificate is issued for
	// <service>.<namespace>.svc (and .svc.cluster.local).
	ServiceName string
	// ExtraDNSNames are more names the certificate is issued for, e.g.
	// "localhost" for a webhook server that the API server reaches by URL.
	ExtraDNSNames []string
	// CertDir is the webhook server's certificate directory; the operator
	// writes tls.crt and tls.key there.
	CertDir string
	// ValidatingWebhookConfigurations and MutatingWebhookConfigurations are
	// the webhook configurations that call this webhook server: their CA
	// bundles must trust the certificate, and with Rotate the operator
	// injects its CA into them.
	ValidatingWebhookConfigurations []string
	MutatingWebhookConfigurations   []string
	// Rotate provisions and rotates the certificate in the Secret and
	// injects the CA into the webhook configurations. Off when an external
	// issuer (cert-manager) does both.
	Rotate bool
}

// DNSName is the name the API server verifies when it calls the webhook
// Service.
func (o Options) DNSName() string {
	return fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace)
}

func (o Options) validate() error {
	var missing []string
	if o.Namespace == "" {
		missing = append(missing, "the operator's namespace")
	}
	if o.ServiceName == "" {
		missing = append(missing, "the webhook Service")
	}
	if o.CertDir == "" {
		missing = append(missing, "the certificate directory")
	}
	if len(o.ValidatingWebhookConfigurations)+len(o.MutatingWebhookConfigurations) == 0 {
		missing = append(missing, "the webhook configurations")
	}
	if len(missing) > 0 {
		return fmt.Errorf("serving certificate from Secret %s/%s: missing %v", o.Namespace, o.SecretName, missing)
	}
	return nil
}

// Certs loads the serving certificate from the Secret and, with
// Options.Rotate, provisions and rotates it.
type Certs struct {
	opts Options
	// loaded is closed once a valid certificate is in CertDir.
	loaded     chan struct{}
	loadedOnce sync.Once
	mu         sync.Mutex
	// reader reads the webhook configurations (from a cache of their own).
	reader client.Reader
	log    logr.Logger
	// notReady is the last reason the readiness check gave, logged when it
	// changes.
	notReady string
}

// New checks the options. Wrap the webhook server with GateServer before the
// manager is created, then call Add.
func New(opts Options) (*Certs, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Certs{opts: opts, loaded: make(chan struct{}), log: logr.Discard()}, nil
}

// GateServer returns the webhook server, started only once a certificate has
// been loaded: controller-runtime's webhook server cannot start without its
// certificate files.
func (c *Certs) GateServer(srv webhook.Server) webhook.Server {
	return &gatedServer{Server: srv, open: c.loaded}
}

type gatedServer struct {
	webhook.Server
	open <-chan struct{}
}

// Start waits for the certificate, then serves.
func (g *gatedServer) Start(ctx context.Context) error {
	select {
	case <-g.open:
		return g.Server.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}

// Add registers the certificate machinery with the manager: a cache of the
// Secret and the webhook configurations, the loader, and with Options.Rotate
// the rotator.
func (c *Certs) Add(mgr ctrl.Manager) error {
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{c.opts.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", c.opts.SecretName),
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: nameSelector(c.opts.ValidatingWebhookConfigurations)},
		&admissionregistrationv1.MutatingWebhookConfiguration{}:   {Field: nameSelector(c.opts.MutatingWebhookConfigurations)},
	}
	ca, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		ByObject:         byObject,
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("create the cache of Secret %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	c.reader = ca
	if err := mgr.Add(everyReplica{ca}); err != nil {
		return fmt.Errorf("add the certificate cache: %w", err)
	}
	log := mgr.GetLogger().WithName("certs").WithValues("Secret", klog.KRef(c.opts.Namespace, c.opts.SecretName))
	c.log = log
	inf, err := ca.GetInformer(context.Background(), &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("get the informer of Secret %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	load := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok && s.Name == c.opts.SecretName {
			c.load(log, s)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, obj any) { load(obj) },
	}); err != nil {
		return fmt.Errorf("watch Secret %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	for _, obj := range []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}} {
		if _, err := ca.GetInformer(context.Background(), obj); err != nil {
			return fmt.Errorf("get the informer of webhook configurations: %w", err)
		}
	}
	if c.opts.Rotate {
		if err := addRotator(mgr, c.opts); err != nil {
			return err
		}
	}
	return nil
}

// everyReplica runs the certificate cache on every replica, not only on the
// elected leader: controller-runtime puts a runnable that does not say
// otherwise into the leader-election group, and a replica that never loads
// its certificate never serves the webhooks (and is never Ready).
type everyReplica struct{ cache.Cache }

// NeedLeaderElection is false: every replica serves the webhooks.
func (everyReplica) NeedLeaderElection() bool { return false }

// nameSelector restricts a watch to one object when there is one name, so
// that RBAC may grant it by resourceNames.
func nameSelector(names []string) fields.Selector {
	if len(names) == 1 {
		return fields.OneTermEqualSelector("metadata.name", names[0])
	}
	return nil
}

// ServerAddress is the address the readiness check dials: the webhook
// server's host (loopback when it listens on every address) and port.
func ServerAddress(host string, port int) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// errNotLoaded is returned by the readiness check before a certificate was
// loaded.
var errNotLoaded = errors.New("no serving certificate loaded yet")
