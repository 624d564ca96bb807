package setup

import (
	ctrl "sigs.k8s.io/controller-runtime"

	fencingwebhook "github.com/fencedlease/fencedlease/internal/webhook/fencing"
	"github.com/fencedlease/fencedlease/internal/webhook/podinject"
)

// WebhookOptions configure the admission webhooks.
type WebhookOptions struct {
	// OperatorUsers are the user names the operator itself authenticates as
	// (its service account, "system:serviceaccount:<namespace>:<name>"). The
	// fencing webhook lets them write protected objects.
	OperatorUsers []string
	// BreakGlassUsers and BreakGlassGroups may write protected objects without
	// a token, for repairs by a person. Every such write is logged, recorded
	// as an Event and counted.
	BreakGlassUsers  []string
	BreakGlassGroups []string
}

// webhookRegistrars are the admission webhooks of the operator, each adding
// its handler to the manager's webhook server.
var webhookRegistrars = []func(ctrl.Manager, WebhookOptions) error{
	func(mgr ctrl.Manager, _ WebhookOptions) error { return podinject.Add(mgr) },
	func(mgr ctrl.Manager, o WebhookOptions) error {
		return fencingwebhook.Add(mgr, fencingwebhook.Options{OperatorUsers: o.OperatorUsers, BreakGlassUsers: o.BreakGlassUsers, BreakGlassGroups: o.BreakGlassGroups})
	},
}

// AddWebhooks registers every admission webhook with the manager's webhook
// server.
func AddWebhooks(mgr ctrl.Manager, opts WebhookOptions) error {
	for _, add := range webhookRegistrars {
		if err := add(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}
