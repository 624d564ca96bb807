package policy_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestOperatorRBAC: with the RBAC that config/rbac generates, the operator
// can neither list nor get Secrets (nor ConfigMaps), anywhere, except the
// one Secret that keeps its webhooks' path token; and of the webhook
// configurations it may change only its own two.
func TestOperatorRBAC(t *testing.T) {
	harness.Needs(t, harness.ControlPlane)
	t.Parallel()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	op, err := client.New(operatorConfig, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	ns, err := testenv.Namespace(ctx, env.Client, "rbac")
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-password"}, StringData: map[string]string{"password": "x"}}
	g.Expect(env.Client.Create(ctx, secret)).To(Succeed())
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.OperatorNamespace, Name: "another"}}
	g.Expect(env.Client.Create(ctx, own)).To(Succeed())
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.OperatorNamespace, Name: setup.DefaultTokenSecret}}
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, token))).To(Succeed())

	forbidden := func(err error, msg string) {
		g.ExpectWithOffset(1, err).To(MatchError(msg))
		g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue())
	}
	user := fmt.Sprintf("User %q", testenv.OperatorUser)
	forbidden(op.List(ctx, &corev1.SecretList{}), `secrets is forbidden: `+user+` cannot list resource "secrets" in API group "" at the cluster scope`)
	forbidden(op.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)), `secrets is forbidden: `+user+` cannot list resource "secrets" in API group "" in the namespace "`+ns+`"`)
	forbidden(op.List(ctx, &corev1.SecretList{}, client.InNamespace(testenv.OperatorNamespace)),
		`secrets is forbidden: `+user+` cannot list resource "secrets" in API group "" in the namespace "`+testenv.OperatorNamespace+`"`)
	forbidden(op.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}), `secrets "db-password" is forbidden: `+user+` cannot get resource "secrets" in API group "" in the namespace "`+ns+`"`)
	forbidden(op.Get(ctx, client.ObjectKeyFromObject(own), &corev1.Secret{}), `secrets "another" is forbidden: `+user+` cannot get resource "secrets" in API group "" in the namespace "`+testenv.OperatorNamespace+`"`)
	forbidden(op.List(ctx, &corev1.ConfigMapList{}), `configmaps is forbidden: `+user+` cannot list resource "configmaps" in API group "" at the cluster scope`)
	g.Expect(op.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{})).To(Succeed())

	// Someone else's webhook configuration: readable (by name) only if it is
	// one of the operator's, never writable.
	other := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "someone-else-" + ns}}
	g.Expect(env.Client.Create(ctx, other)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), other) })
	forbidden(op.Update(ctx, other.DeepCopy()), fmt.Sprintf(`validatingwebhookconfigurations.admissionregistration.k8s.io %q is forbidden: %s cannot update resource "validatingwebhookconfigurations" in API group "admissionregistration.k8s.io" at the cluster scope`, other.Name, user))
	forbidden(op.Get(ctx, types.NamespacedName{Name: other.Name}, &admissionregistrationv1.ValidatingWebhookConfiguration{}),
		fmt.Sprintf(`validatingwebhookconfigurations.admissionregistration.k8s.io %q is forbidden: %s cannot get resource "validatingwebhookconfigurations" in API group "admissionregistration.k8s.io" at the cluster scope`, other.Name, user))
}
