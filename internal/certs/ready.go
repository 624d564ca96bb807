package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// ReadyChecker reports Ready only when the webhook server at addr presents a
// certificate that is valid now for the webhook Service and that the CA
// bundle of every webhook of every configured webhook configuration trusts:
// then the API server's calls through this replica succeed. Before that,
// the error says what is missing.
func (c *Certs) ReadyChecker(addr string) healthz.Checker {
	return func(req *http.Request) error {
		err := c.check(req.Context(), addr)
		c.mu.Lock()
		defer c.mu.Unlock()
		// The probe's answer withholds the reason: log it when it changes.
		switch {
		case err != nil && err.Error() != c.notReady:
			c.log.Info("Not ready", "reason", err.Error())
			c.notReady = err.Error()
		case err == nil && c.notReady != "":
			c.log.Info("Ready: the webhook configurations trust the serving certificate")
			c.notReady = ""
		}
		return err
	}
}

// check is the readiness condition; see ReadyChecker.
func (c *Certs) check(ctx context.Context, addr string) error {
	select {
	case <-c.loaded:
	default:
		return fmt.Errorf("%w from Secret %s/%s", errNotLoaded, c.opts.Namespace, c.opts.SecretName)
	}
	chain, err := servedChain(ctx, addr)
	if err != nil {
		return err
	}
	bundles, err := c.caBundles(ctx)
	if err != nil {
		return err
	}
	for _, b := range bundles {
		if err := verify(chain, b.pem, c.opts.DNSName()); err != nil {
			return fmt.Errorf("%s: the serving certificate is not trusted by its CA bundle: %w", b.owner, err)
		}
	}
	return nil
}

// servedChain is the certificate chain the webhook server presents.
func servedChain(ctx context.Context, addr string) ([]*x509.Certificate, error) {
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		// Only reads what the server presents; verify checks it.
		Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // the chain is verified by verify against the webhook configurations' CA bundles
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("webhook server at %s is not serving: %w", addr, err)
	}
	defer conn.Close()
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil, fmt.Errorf("webhook server at %s: not a TLS connection", addr)
	}
	chain := tc.ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return nil, fmt.Errorf("webhook server at %s presents no certificate", addr)
	}
	return chain, nil
}

type bundle struct {
	owner string
	pem   []byte
}

// caBundles are the CA bundles of every webhook of the configured webhook
// configurations.
func (c *Certs) caBundles(ctx context.Context) ([]bundle, error) {
	var out []bundle
	add := func(kind, config, hook string, cc admissionregistrationv1.WebhookClientConfig) error {
		owner := fmt.Sprintf("%s %s, webhook %s", kind, config, hook)
		if len(cc.CABundle) == 0 {
			return fmt.Errorf("%s has no CA bundle yet", owner)
		}
		out = append(out, bundle{owner: owner, pem: cc.CABundle})
		return nil
	}
	for _, n := range c.opts.ValidatingWebhookConfigurations {
		var wc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.reader.Get(ctx, types.NamespacedName{Name: n}, &wc); err != nil {
			return nil, fmt.Errorf("get ValidatingWebhookConfiguration %s: %w", n, err)
		}
		for _, h := range wc.Webhooks {
			if err := add("ValidatingWebhookConfiguration", n, h.Name, h.ClientConfig); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range c.opts.MutatingWebhookConfigurations {
		var wc admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.reader.Get(ctx, types.NamespacedName{Name: n}, &wc); err != nil {
			return nil, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", n, err)
		}
		for _, h := range wc.Webhooks {
			if err := add("MutatingWebhookConfiguration", n, h.Name, h.ClientConfig); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// verify checks the chain as the API server does when it calls the webhook
// Service: the leaf names the Service, is valid now, is meant for a server,
// and leads to a CA of the bundle.
func verify(chain []*x509.Certificate, caBundle []byte, dnsName string) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		return errors.New("the CA bundle holds no PEM certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		DNSName:       dnsName,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}
