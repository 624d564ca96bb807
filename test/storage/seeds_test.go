package storage_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/internal/record"
	"github.com/fencedlease/fencedlease/pkg/fence/fences3"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

const reportKey = "reports/monthly.csv"

// TestSeedsScenario is the seeds' stale holder, end to end, once through
// the fence gateway and once with fences3's fenced pointer: A holds the
// FencedLease (holder renewal) with fence FA and writes a draft; A's
// process is stopped (SIGSTOP) past its lease; B is granted FB > FA and
// writes the report; A is continued and writes with FA. A is rejected, and
// the object is B's report with B's fence.
func TestSeedsScenario(t *testing.T) {
	needsServers(t)
	for _, way := range []string{"gateway", "pointer"} {
		t.Run(way, func(t *testing.T) { seedsScenario(t, way) })
	}
}

func seedsScenario(t *testing.T, way string) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t, "seeds")
	bucket := ns + "-" + way
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "exporter"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "exporter", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = 3
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(1))
	}))).To(Succeed())
	a := readyPod(t, ns, "a", labels, time.Hour)
	b := readyPod(t, ns, "b", labels, time.Minute)
	waitLease(g, ns, "exporter")

	vars := []string{"MODE=seeds", "LEASE=exporter", "MARGIN=500ms", "KEY=" + reportKey, "BUCKET=" + bucket}
	var gw *testGateway
	if way == "gateway" {
		gw = startGateway(t, []gateway.Route{{Bucket: bucket, Prefix: "reports/", Namespace: ns, FencedLease: "exporter"}}, nil)
		vars = append(vars, "GATEWAY="+gw.URL)
	} else {
		vars = append(vars, "STORE="+store.Endpoint, "STORE_ACCESS_KEY="+store.AccessKey, "STORE_SECRET_KEY="+store.SecretKey, "STORE_BUCKET="+bucket)
	}

	// A holds and starts the report.
	pa := startWriter(t, a, vars...)
	fa := holderFence(g, pa)
	g.Expect(result(g, pa, "write draft by A")).To(HavePrefix("accepted"))
	pb := startWriter(t, b, vars...)

	// A pauses past its lease; B is granted the next fence and writes.
	g.Expect(pa.pause()).To(Succeed())
	fb := holderFence(g, pb)
	g.Expect(fb).To(BeNumerically(">", fa))
	g.Expect(result(g, pb, "write report by B")).To(HavePrefix("accepted"))

	// A resumes and submits with its old fence: rejected.
	g.Expect(pa.resume()).To(Succeed())
	res := result(g, pa, "write late report by A")
	t.Logf("A (fence %d) after B (fence %d): %s", fa, fb, res)
	if way == "gateway" {
		g.Expect(res).To(Equal(fmt.Sprintf("rejected FencedLeaseStaleFence write to %s/%s with fence %d denied: stale fence, FencedLease %s/exporter is held with fence %d by pod b",
			bucket, reportKey, fa, ns, fb)))
	} else {
		g.Expect(res).To(HavePrefix("rejected ErrStale "))
		g.Expect(res).To(ContainSubstring(fmt.Sprintf("with fence %d", fa)))
		g.Expect(res).To(ContainSubstring(fmt.Sprintf("pointer fence %d", fb)))
	}

	// B's report is intact, with B's fence.
	if way == "gateway" {
		out, err := store.Client("").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(reportKey)})
		g.Expect(err).NotTo(HaveOccurred())
		defer out.Body.Close()
		data, _ := io.ReadAll(out.Body)
		g.Expect(string(data)).To(Equal("report by B"))
		g.Expect(out.Metadata).To(HaveKeyWithValue(gateway.MetaFence, strconv.FormatInt(fb, 10)))

		// As the webhook does: an Event on the FencedLease, and a metric.
		g.Eventually(func() []string {
			var list eventsv1.EventList
			g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == fencingv1alpha1.EventStaleWriteRejected && e.Regarding.Name == "exporter" && e.Regarding.Kind == "FencedLease" {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).WithTimeout(timeout).Should(ContainElement(ContainSubstring(fmt.Sprintf("with fence %d denied: stale fence", fa))))
		g.Expect(counter(g, gw, "put", "denied", "stale_fence")).To(Equal(1.0))
		g.Expect(counter(g, gw, "put", "allowed", "holder")).To(Equal(2.0))
	} else {
		p, rc, err := fences3.New(store.Client(""), bucket).Get(ctx, reportKey)
		g.Expect(err).NotTo(HaveOccurred())
		defer rc.Close()
		data, _ := io.ReadAll(rc)
		g.Expect(string(data)).To(Equal("report by B"))
		g.Expect(p.Fence).To(Equal(fb))
		g.Expect(p.Seq).To(Equal(int64(2)), "A's draft, then B's report: A's late write moved nothing")
	}
}

// waitLease waits until the operator has created the Lease.
func waitLease(g Gomega, ns, name string) {
	g.Eventually(func() error {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &coordinationv1.Lease{})
	}).WithTimeout(timeout).Should(Succeed())
}

func holderFence(g Gomega, p *proc) int64 {
	s, err := p.line("holder ", timeout)
	g.Expect(err).NotTo(HaveOccurred())
	f, err := record.ParseFence(s)
	g.Expect(err).NotTo(HaveOccurred())
	return f
}

// result sends a write command and returns the writer's "result" line.
func result(g Gomega, p *proc, cmd string) string {
	g.Expect(p.send(cmd)).To(Succeed())
	s, err := p.line("result ", timeout)
	g.Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(s)
}

// counter reads fencedlease_gateway_requests_total for the labels.
func counter(g Gomega, gw *testGateway, op, result, reason string) float64 {
	families, err := harness.Gather(gw.registry)
	g.Expect(err).NotTo(HaveOccurred())
	v, _ := harness.Sample(families, "fencedlease_gateway_requests_total", map[string]string{"operation": op, "result": result, "reason": reason})
	return v
}
