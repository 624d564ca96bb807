package certs

import (
	"fmt"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// fieldOwner is the field manager of the CA bundles the rotator injects.
const fieldOwner = "fencedlease"

// addRotator lets cert-controller provision the CA and the serving
// certificate in the Secret, renew them before they expire (the server
// certificate lasts a year and is renewed 90 days ahead; the CA lasts ten),
// and keep the CA bundle of every webhook configuration current.
//
// Every replica runs it, not only the leader: a replica that is not leader
// serves the webhooks too and must not wait for an election to get a
// certificate. Two replicas that provision at once race on the Secret's
// resourceVersion; the loser re-reads the winner's certificate.
func addRotator(mgr ctrl.Manager, o Options) error {
	var hooks []rotator.WebhookInfo
	for _, n := range o.ValidatingWebhookConfigurations {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Validating})
	}
	for _, n := range o.MutatingWebhookConfigurations {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Mutating})
	}
	r := &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CertName:       CertName,
		KeyName:        KeyName,
		CAName:         "fencedlease-ca",
		CAOrganization: "fencedlease",
		DNSName:        o.DNSName(),
		ExtraDNSNames:  append([]string{o.DNSName() + ".cluster.local"}, o.ExtraDNSNames...),
		IsReady:        make(chan struct{}),
		Webhooks:       hooks,
		FieldOwner:     fieldOwner,
	}
	if err := rotator.AddRotator(mgr, r); err != nil {
		return fmt.Errorf("add the certificate rotator for Secret %s/%s: %w", o.Namespace, o.SecretName, err)
	}
	return nil
}
