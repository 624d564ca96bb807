package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
)

// The operator's identity in the default install (config/default): its
// namespace, its service account, and the user name the API server gives it.
const (
	OperatorNamespace      = setup.DefaultNamespace
	OperatorServiceAccount = "fencedlease-controller-manager"
	OperatorUser           = "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
)

// OperatorConfig returns a config that acts as the operator's service
// account, with nothing but the RBAC that controller-gen generates into
// config/rbac/role.yaml, bound as config/rbac binds it (the ClusterRole for
// the cluster, the Role in the operator's namespace). The admission policies
// tell the operator apart from an administrator by that user name. It may be
// called again: what exists is updated.
func OperatorConfig(ctx context.Context, e *Env) (*rest.Config, error) {
	c := e.Client
	if err := ensure(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: OperatorNamespace, Name: OperatorServiceAccount}}
	if err := ensure(ctx, c, sa); err != nil {
		return nil, err
	}
	roles, err := generatedRoles()
	if err != nil {
		return nil, err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: OperatorNamespace, Name: OperatorServiceAccount}}
	for _, r := range roles {
		var binding client.Object
		switch r := r.(type) {
		case *rbacv1.ClusterRole:
			r.Name = InstallPrefix + r.Name
			r.Rules = installedWebhookNames(r.Rules)
			binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}
		case *rbacv1.Role:
			r.Name, r.Namespace = InstallPrefix+r.Name, OperatorNamespace
			binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: OperatorNamespace, Name: r.Name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
		}
		if err := apply(ctx, c, r); err != nil {
			return nil, err
		}
		if err := apply(ctx, c, binding); err != nil {
			return nil, err
		}
	}
	return ServiceAccountConfig(ctx, e.Config, sa)
}

// installedWebhookNames renames the webhook configurations and the
// ClusterRole (the scale guard's) that rules name by resourceNames
// (config/'s names) as both installs do: with InstallPrefix, the name
// WithWebhooks and InstallScaleGuard install them under.
func installedWebhookNames(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	for i, r := range rules {
		webhooks := slices.Contains(r.APIGroups, admissionregistrationv1.GroupName) &&
			slices.ContainsFunc(r.Resources, func(res string) bool { return strings.HasSuffix(res, "webhookconfigurations") })
		roles := slices.Contains(r.APIGroups, rbacv1.GroupName) && slices.Contains(r.Resources, "clusterroles")
		if !webhooks && !roles {
			continue
		}
		for j, n := range r.ResourceNames {
			rules[i].ResourceNames[j] = InstallPrefix + n
		}
	}
	return rules
}

// ServiceAccountConfig returns a config that authenticates with a token of
// the service account from the TokenRequest API, bound to nothing.
func ServiceAccountConfig(ctx context.Context, cfg *rest.Config, sa *corev1.ServiceAccount) (*rest.Config, error) {
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("request a token for service account %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	sc := rest.AnonymousClientConfig(cfg)
	sc.BearerToken = tr.Status.Token
	return sc, nil
}

// generatedRoles reads the ClusterRole and Role of config/rbac/role.yaml.
func generatedRoles() ([]client.Object, error) {
	path := filepath.Join(RepoRoot(), "config", "rbac", "role.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []client.Object
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var meta metav1.TypeMeta
		raw := map[string]any{}
		if err := d.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(raw) == 0 {
			continue
		}
		meta.Kind, _ = raw["kind"].(string)
		var obj client.Object
		switch meta.Kind {
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "Role":
			obj = &rbacv1.Role{}
		default:
			return nil, fmt.Errorf("%s: unexpected kind %q", path, meta.Kind)
		}
		if err := fromMap(raw, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// NamespaceEditor returns a client for a user bound to the built-in edit
// ClusterRole in the namespace, as `kubectl create rolebinding --clusterrole
// edit` does.
func NamespaceEditor(ctx context.Context, e *Env, namespace, user string) (client.Client, error) {
	if err := AggregateClusterRole(ctx, e.Client, "edit"); err != nil {
		return nil, err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "edit-" + strings.ReplaceAll(user, ":", "-")},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := apply(ctx, e.Client, rb); err != nil {
		return nil, err
	}
	return UserClient(e, user)
}

// addUserMu serializes the issue of client certificates.
var addUserMu sync.Mutex

// UserClient returns a client that authenticates as the user (and groups)
// with a client certificate, with what RBAC grants them.
func UserClient(e *Env, user string, groups ...string) (client.Client, error) {
	addUserMu.Lock()
	au, err := e.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	addUserMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", user, err)
	}
	return client.New(au.Config(), client.Options{Scheme: setup.Scheme()})
}

// AggregateClusterRole fills an aggregated ClusterRole (edit, view, admin)
// with the rules of the ClusterRoles its aggregationRule selects, as the
// clusterrole-aggregation controller of kube-controller-manager does: envtest
// runs none, and leaves such roles empty.
func AggregateClusterRole(ctx context.Context, c client.Client, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		role := &rbacv1.ClusterRole{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, role); err != nil {
			return fmt.Errorf("get ClusterRole %s: %w", name, err)
		}
		if role.AggregationRule == nil {
			return fmt.Errorf("ClusterRole %s has no aggregationRule", name)
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("ClusterRole %s: %w", name, err)
			}
			var list rbacv1.ClusterRoleList
			if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: s}); err != nil {
				return fmt.Errorf("list the ClusterRoles aggregated into %s: %w", name, err)
			}
			slices.SortFunc(list.Items, func(a, b rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
			for _, r := range list.Items {
				rules = append(rules, r.Rules...)
			}
		}
		role.Rules = rules
		return c.Update(ctx, role)
	})
}

// ensure creates obj unless it exists.
func ensure(ctx context.Context, c client.Client, obj client.Object) error {
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// apply creates obj, or replaces what exists of that name.
func apply(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
		return nil
	}
	existing := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return fmt.Errorf("get %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	if err := c.Update(ctx, obj); err != nil {
		return fmt.Errorf("update %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// ScaleGuard is the scale guard as config/rbac/scale_guard.yaml installs it
// (InstallScaleGuard), and as config/manager passes it to the operator.
var ScaleGuard = scaleguard.Guard{Role: InstallPrefix + "scale-guard", SANamespace: OperatorNamespace, SAName: InstallPrefix + "scale-guard"}

// InstallScaleGuard installs the scale guard's service account, ClusterRole
// (without rules) and binding, as config/rbac/scale_guard.yaml does.
func InstallScaleGuard(ctx context.Context, c client.Client) error {
	g := ScaleGuard
	if err := ensure(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.SANamespace}}); err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: g.SANamespace, Name: g.SAName}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: g.Role}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: g.Role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g.Role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: g.SANamespace, Name: g.SAName}}},
	}
	for _, o := range objs {
		if err := ensure(ctx, c, o); err != nil {
			return err
		}
	}
	return nil
}

// WorkloadRole reads the workload ClusterRole of
// config/rbac/workload_role.yaml, named fencedlease-workload as the install
// names it: what a workload's service account needs to renew its own
// Lease.
func WorkloadRole() (*rbacv1.ClusterRole, error) {
	path := filepath.Join(RepoRoot(), "config", "rbac", "workload_role.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	role.Name = "fencedlease-workload"
	return role, nil
}
