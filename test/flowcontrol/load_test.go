//go:build apf

package flowcontrol_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// busyNamespace is the competing load: service accounts of one namespace
// (jobs, each with its own account, as a CI or batch namespace has them),
// each running workers that patch their own ConfigMap and, every fifth
// request, list the namespace's ConfigMaps, back to back. Plain service
// accounts: the built-in service-accounts FlowSchema puts them into
// workload-low, one flow each.
type busyNamespace struct {
	ns      string
	clients []client.Client
	workers int
	// ok, tooMany and failed count the requests of the running load.
	ok, tooMany, failed atomic.Int64
	cancel              context.CancelFunc
	wg                  sync.WaitGroup
}

// payload makes every ConfigMap about half a KiB, so that a list of the
// namespace is some work for the API server, as real lists are.
var payload = strings.Repeat("x", 512)

// newBusyNamespace creates the namespace, its service accounts, their RBAC
// (ConfigMaps of the namespace) and one ConfigMap per worker.
func newBusyNamespace(ctx context.Context, e *testenv.Env, accounts, workers int) (*busyNamespace, error) {
	ns, err := testenv.Namespace(ctx, e.Client, "busy")
	if err != nil {
		return nil, err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "patch", "update", "create"}}}}
	if err := e.Client.Create(ctx, role); err != nil {
		return nil, fmt.Errorf("create Role %s/jobs: %w", ns, err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "jobs"}}
	b := &busyNamespace{ns: ns, workers: workers}
	for i := range accounts {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("job-%d", i)}}
		if err := e.Client.Create(ctx, sa); err != nil {
			return nil, fmt.Errorf("create ServiceAccount %s/%s: %w", ns, sa.Name, err)
		}
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name})
		cfg, err := testenv.ServiceAccountConfig(ctx, e.Config, sa)
		if err != nil {
			return nil, err
		}
		cfg.QPS, cfg.Burst = -1, 0
		c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
		if err != nil {
			return nil, err
		}
		b.clients = append(b.clients, c)
		for w := range workers {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b.configMap(i, w)}, Data: map[string]string{"seq": "0", "payload": payload}}
			if err := e.Client.Create(ctx, cm); err != nil {
				return nil, fmt.Errorf("create ConfigMap %s/%s: %w", ns, cm.Name, err)
			}
		}
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		return nil, fmt.Errorf("create RoleBinding %s/jobs: %w", ns, err)
	}
	return b, nil
}

func (b *busyNamespace) configMap(account, worker int) string {
	return fmt.Sprintf("job-%d-%d", account, worker)
}

// start runs the workers until stop.
func (b *busyNamespace) start(ctx context.Context) {
	ctx, b.cancel = context.WithCancel(ctx)
	for i, c := range b.clients {
		for w := range b.workers {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.work(ctx, c, b.configMap(i, w))
			}()
		}
	}
}

func (b *busyNamespace) work(ctx context.Context, c client.Client, name string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name}}
	for n := 0; ctx.Err() == nil; n++ {
		var err error
		if n%5 == 4 {
			err = c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(b.ns))
		} else {
			patch := fmt.Appendf(nil, `{"data":{"seq":%q}}`, strconv.Itoa(n))
			err = c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
		}
		switch {
		case ctx.Err() != nil:
		case err == nil:
			b.ok.Add(1)
		case apierrors.IsTooManyRequests(err):
			b.tooMany.Add(1)
		default:
			b.failed.Add(1)
		}
	}
}

// stop stops the workers and waits for them.
func (b *busyNamespace) stop() {
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
}

// counts reads and resets the counters.
func (b *busyNamespace) counts() (ok, tooMany, failed int64) {
	return b.ok.Swap(0), b.tooMany.Swap(0), b.failed.Swap(0)
}
