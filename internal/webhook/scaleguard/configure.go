package scaleguard

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// ConditionName is the name of the scale webhook's matchCondition.
const ConditionName = "scale-guarded"

// MatchCondition is the scale webhook's matchCondition for this guard.
func (g Guard) MatchCondition() admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: ConditionName, Expression: MatchExpression(g.SANamespace, g.SAName)}
}

// Configure gives the webhook named hook of cfg the guard's matchCondition
// (replacing one of the same name, keeping the others), and reports whether
// it changed anything. A configuration without that webhook is left alone.
func (g Guard) Configure(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, hook string) bool {
	want := g.MatchCondition()
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		if w.Name != hook {
			continue
		}
		for j, c := range w.MatchConditions {
			if c.Name == want.Name {
				if c == want {
					return false
				}
				w.MatchConditions[j] = want
				return true
			}
		}
		w.MatchConditions = append(w.MatchConditions, want)
		return true
	}
	return false
}
