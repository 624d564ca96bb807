package install_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// flowControlled: the chart's FlowSchema matches the operator as it runs,
// with the token of its pod: the API server counts the operator's requests
// of the tests before this one as dispatched by that FlowSchema into the
// chart's priority level, and answers a request of the operator with their
// UIDs (X-Kubernetes-PF-FlowSchema-UID, -PriorityLevel-UID). A FlowSchema
// that named another service account, or that came after the built-in
// service-accounts schema, would leave the operator in workload-low.
func flowControlled(t *testing.T, op *operator) {
	g := NewWithT(t)
	ctx := context.Background()
	fs := &flowcontrolv1.FlowSchema{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: defaultRelease + "-operator"}, fs)).To(Succeed())
	pl := &flowcontrolv1.PriorityLevelConfiguration{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: fs.Spec.PriorityLevelConfiguration.Name}, pl)).To(Succeed())
	g.Expect(fs.Status.Conditions).To(ContainElement(And(HaveField("Type", BeEquivalentTo(flowcontrolv1.FlowSchemaConditionDangling)),
		HaveField("Status", flowcontrolv1.ConditionFalse))), "the FlowSchema's priority level exists")

	// What the operator did so far.
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	dispatched, _ := testenv.Sample(fams, "apiserver_flowcontrol_dispatched_requests_total",
		map[string]string{"flow_schema": fs.Name, "priority_level": pl.Name})
	g.Expect(dispatched).To(BeNumerically(">", 0), "no request dispatched by FlowSchema %s", fs.Name)

	// One request more, with its answer's headers.
	var header http.Header
	cfg := rest.CopyConfig(op.cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				header = resp.Header
			}
			return resp, err
		})
	})
	ocs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = ocs.CoordinationV1().Leases(defaultNamespace).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)).To(Equal(string(fs.UID)), "classified by FlowSchema %s", fs.Name)
	g.Expect(header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)).To(Equal(string(pl.UID)), "into priority level %s", pl.Name)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
