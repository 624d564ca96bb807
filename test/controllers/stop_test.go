package controllers_test

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// TestManagerRefusesOperatorRenewal: a FencedLease of the default renewal
// (Operator). Two managers start as pods a and b before anything is
// granted; a is then granted. Neither runs its controllers: both Start
// return ErrOperatorRenewal with a message that names the FencedLease,
// says why and what to set, as soon as the Lease records the grant (b, not
// granted, too), and their clients refuse every write with it. Under
// Operator renewal a pod cannot know when its grant ends, so a manager that
// ran would not stop on its own clock.
func TestManagerRefusesOperatorRenewal(t *testing.T) {
	f := newFixture(t)
	f.allow("configmaps", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete")
	f.startOperator()
	f.g.Expect(admin.Create(f.ctx, testenv.FencedLease(f.ns, "widgets", podLabels, nil))).To(Succeed())
	a, b := f.pod("a"), f.pod("b")
	ma := f.startManager(a, nil, fencedcontroller.Options{})
	mb := f.startManager(b, nil, fencedcontroller.Options{})
	time.Sleep(time.Second)
	f.ready(a, time.Hour)
	for _, m := range []*inProcess{ma, mb} {
		var err error
		f.g.Eventually(m.done).WithTimeout(timeout).Should(Receive(&err))
		f.g.Expect(errors.Is(err, fencedcontroller.ErrOperatorRenewal)).To(BeTrue(), "%v", err)
		f.g.Expect(err.Error()).To(Equal("FencedLease " + f.ns + "/widgets: its grants are renewed by the operator (spec.renewal: Operator), " +
			"so this pod cannot know on its own clock when its grant ends (the operator vouches for quiet grants without writing the Lease; " +
			"a pod cut off from the API server learns nothing): set spec.renewal: Holder, under which the pod renews its own grant and " +
			"stops its controllers before its own deadline: a fenced controller needs spec.renewal: Holder"))
		started, _, _ := m.probe.times()
		f.g.Expect(started).To(BeZero(), "a controller ran under Operator renewal")
		werr := m.Client().Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "unprotected"}})
		f.g.Expect(errors.Is(werr, fence.ErrNotHolder)).To(BeTrue(), "%v", werr)
		f.g.Expect(werr.Error()).To(ContainSubstring("set spec.renewal: Holder"))
	}
	f.g.Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(admin.Get(f.ctx, clientKey(f.ns, "widgets"), fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(fl.Status.Holder.PodName).To(Equal("a"))
	}).WithTimeout(timeout).Should(Succeed(), "a was granted")
}
