package fencedcontroller

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"k8s.io/client-go/rest"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// DefaultStopLead is how long before its deadline a replica whose grant
// was not renewed stops its controllers, at most (see Options.StopLead).
const DefaultStopLead = 2 * time.Second

// Options say which FencedLease a manager is a candidate of, and how it
// holds it.
type Options struct {
	// Lease is the name of the FencedLease whose holder runs the
	// controllers. Empty: the name in the pod's token files (TokenDir),
	// which the operator writes when it selects the pod.
	Lease string
	// Namespace is the pod's namespace, where the FencedLease is. Empty:
	// $POD_NAMESPACE, else the namespace of the pod's service account.
	Namespace string
	// TokenDir is where the token files are mounted, for Lease;
	// fence.DefaultDir when empty.
	TokenDir string
	// API says how the Session reaches the API server. Nil: the same
	// server, bearer token and CA as the manager's rest.Config, so that the
	// pod that renews the grant is the pod that writes under it. That needs
	// a bearer token bound to the pod (the projected service-account token
	// of a pod is one; rest.InClusterConfig uses it).
	API *fence.APIConfig
	// Margin is how long before its grant would expire on the operator's
	// clock the pod stops holding it (fence.SessionConfig.Margin);
	// fence.DefaultMargin when 0.
	Margin time.Duration
	// StopLead is how long before this pod's deadline the controllers are
	// stopped when the grant was not renewed in time: DefaultStopLead when
	// 0, and never earlier than half way between the renewal that fell due
	// and the deadline, so that a renewal that succeeds late but in time
	// stops nothing. Whatever runs under the grant has then had its context
	// cancelled, and the client refuses every write, before the deadline.
	StopLead time.Duration
	// ReleaseOnCancel releases the grant when the manager is stopped (its
	// context cancelled) while it holds it, once the controllers have
	// returned, so that the next candidate is granted at once rather than
	// when the grant expires: the LeaderElectionReleaseOnCancel of
	// controller-runtime.
	ReleaseOnCancel bool
	// FieldManager is the field manager of subresource writes that name
	// none (ClientOptions.FieldManager). Empty: the first part of the
	// rest.Config's user agent (or of client-go's default one, the
	// program's name), which is what the API server would have named the
	// writer.
	FieldManager string
}

// withDefaults fills in what Options leave empty from cfg and the pod.
func (o Options) withDefaults(cfg *rest.Config) (Options, error) {
	if o.TokenDir == "" {
		o.TokenDir = fence.DefaultDir
	}
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		ns, err := fence.InClusterNamespace()
		if err != nil {
			return o, fmt.Errorf("the pod's namespace: set Options.Namespace or $POD_NAMESPACE: %w", err)
		}
		o.Namespace = ns
	}
	if o.Lease == "" {
		tok, err := fence.Read(o.TokenDir)
		if err != nil {
			return o, fmt.Errorf("the FencedLease: set Options.Lease, or mount the token files: %w", err)
		}
		if tok.Lease == "" {
			return o, fmt.Errorf("the FencedLease: set Options.Lease: the lease file in %s is empty", o.TokenDir)
		}
		o.Lease = tok.Lease
	}
	if o.API == nil {
		api, err := APIConfig(cfg)
		if err != nil {
			return o, err
		}
		o.API = api
	}
	if o.StopLead <= 0 {
		o.StopLead = DefaultStopLead
	}
	if o.FieldManager == "" {
		o.FieldManager = userAgentManager(cfg.UserAgent)
	}
	return o, nil
}

// APIConfig is the Session's view of a rest.Config: the same server, CA
// and bearer token (the token file is read again for every request, so a
// rotated projected token is picked up). Client certificates, exec plugins
// and impersonation cannot be used: the Session must act as the pod, with
// a token bound to it.
func APIConfig(cfg *rest.Config) (*fence.APIConfig, error) {
	switch {
	case cfg == nil || cfg.Host == "":
		return nil, errors.New("the rest.Config names no API server")
	case cfg.BearerToken == "" && cfg.BearerTokenFile == "":
		return nil, errors.New("the rest.Config has no bearer token: a FencedLease candidate acts with its pod's bound service-account token (rest.InClusterConfig, or a kubeconfig with a token); set Options.API otherwise")
	case cfg.Impersonate.UserName != "" || len(cfg.Impersonate.Groups) > 0 || cfg.Impersonate.UID != "":
		return nil, errors.New("the rest.Config impersonates another user: the pod must renew its grant and write as itself")
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		data, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the API server's CA: %w", err)
		}
		ca = data
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	token, file := cfg.BearerToken, cfg.BearerTokenFile
	return &fence.APIConfig{Host: host, CAData: ca, Token: func() (string, error) {
		if file == "" {
			return token, nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(data)), nil
	}}, nil
}

// userAgentManager is the field manager the API server derives from a user
// agent: what comes before the first "/", printable characters only.
func userAgentManager(ua string) string {
	if ua == "" {
		ua = rest.DefaultKubernetesUserAgent()
	}
	m, _, _ := strings.Cut(ua, "/")
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, m)
}
