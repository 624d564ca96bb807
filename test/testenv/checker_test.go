package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
)

var env *Env

func TestMain(m *testing.M) { Main(m, &env) }

// testNamespace needs a control plane and makes a namespace for the test,
// with a context that ends within a minute or with the test.
func testNamespace(t *testing.T, prefix string) (context.Context, string) {
	t.Helper()
	harness.Needs(t, harness.ControlPlane)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ns, err := Namespace(ctx, env.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, ns
}

// shortWatches makes the API server end every watch after a second, as it
// ends every watch after a few minutes in a long run.
type shortWatches struct {
	client.WithWatch
	watches int
	mu      sync.Mutex
}

func (s *shortWatches) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	if lo.Raw == nil {
		lo.Raw = &metav1.ListOptions{}
	}
	lo.Raw.TimeoutSeconds = ptr.To[int64](1)
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return s.WithWatch.Watch(ctx, list, lo)
}

// TestFollowResumesClosedWatches: every change is seen once, in order,
// although the API server closes the watch every second.
func TestFollowResumesClosedWatches(t *testing.T) {
	ctx, ns := testNamespace(t, "follow")
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	sw := &shortWatches{WithWatch: wc}
	var mu sync.Mutex
	var seen []string
	gaps := 0
	err = Follow(ctx, sw, ns, &corev1.ConfigMapList{}, func() { mu.Lock(); gaps++; mu.Unlock() }, func(t watch.EventType, o runtime.Object) {
		if t == watch.Added {
			mu.Lock()
			seen = append(seen, o.(*corev1.ConfigMap).Name)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 8 {
		name := fmt.Sprintf("cm-%d", i)
		want = append(want, name)
		if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got, g := strings.Join(seen, ","), gaps
		mu.Unlock()
		if got == strings.Join(want, ",") && g == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("saw %q with %d gaps, want %q and no gap", got, g, strings.Join(want, ","))
		}
		time.Sleep(100 * time.Millisecond)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.watches < 3 {
		t.Fatalf("the watch was opened %d times: the server did not close it, so resuming was not tested", sw.watches)
	}
}

// TestHolderCheckerSeesViolations: the checker reports two holders at once,
// a fence that goes back and a fence published to a second pod, which a
// checker that watches nothing would miss.
func TestHolderCheckerSeesViolations(t *testing.T) {
	ctx, ns := testNamespace(t, "checker")
	hc, err := WatchHolders(ctx, env.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(name, fence string) {
		t.Helper()
		pod := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{fencingv1alpha1.AnnotationLease: "db",
			fencingv1alpha1.AnnotationRole: fencingv1alpha1.RoleHolder, fencingv1alpha1.AnnotationFence: fence}
		if err := env.Client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b"} {
		if _, err := CreatePod(ctx, env.Client, Pod{Namespace: ns, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	publish("a", "20")
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(strings.Join(hc.Violations(), "\n"), want) {
			if time.Now().After(deadline) {
				t.Fatalf("violations %q do not report %q", hc.Violations(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(time.Second)
	if v := hc.Violations(); len(v) != 0 {
		t.Fatalf("one holder is no violation, got %q", v)
	}
	publish("b", "10")
	wait("pod b got fence 10 of FencedLease db after fence 20 was published")
	wait("2 pods published as holder of FencedLease db at once")
	publish("b", "20")
	wait("pod b got fence 20 of FencedLease db, which was published to pod a")
}
