package podinject

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

func testScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	NewWithT(t).Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
	NewWithT(t).Expect(fencingv1alpha1.AddToScheme(s)).To(Succeed())
	return s
}

// createRequest is the admission request for creating p; extra fields are
// merged into its spec, as a newer API server would send fields this build
// does not know.
func createRequest(t *testing.T, p *corev1.Pod, extraSpec map[string]any) admission.Request {
	g := NewWithT(t)
	raw, err := json.Marshal(p)
	g.Expect(err).NotTo(HaveOccurred())
	if extraSpec != nil {
		var m map[string]any
		g.Expect(json.Unmarshal(raw, &m)).To(Succeed())
		for k, v := range extraSpec {
			m["spec"].(map[string]any)[k] = v
		}
		raw, err = json.Marshal(m)
		g.Expect(err).NotTo(HaveOccurred())
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Namespace: p.Namespace,
		Name:      p.Name,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

func TestHandler(t *testing.T) {
	dbLease := fl("ns", "db", true, metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}})
	s := testScheme(t)
	reader := func(objs ...client.Object) client.Reader {
		return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	}
	failing := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache is down")
		},
	}).Build()

	tests := []struct {
		name         string
		cache, live  client.Reader
		pod          *corev1.Pod
		extraSpec    map[string]any
		wantAllowed  bool
		wantPatched  bool
		wantCode     int32
		wantMessage  string
		wantWarnings []string
	}{{
		name:        "selected pod is patched with adds only, unknown fields untouched",
		cache:       reader(&dbLease),
		pod:         pod(nil),
		extraSpec:   map[string]any{"fieldFromTheFuture": map[string]any{"x": 1}},
		wantAllowed: true,
		wantPatched: true,
	}, {
		name:        "a FencedLease the cache has not seen yet is found on the API server",
		cache:       reader(),
		live:        reader(&dbLease),
		pod:         pod(nil),
		wantAllowed: true,
		wantPatched: true,
	}, {
		name:         "not selected: allowed unchanged with a warning",
		cache:        reader(),
		live:         reader(),
		pod:          pod(nil),
		wantAllowed:  true,
		wantWarnings: []string{`pod "ns/db-0" has label fencedlease.io/inject=true but no FencedLease or FencedShardSet in namespace "ns" selects it: no token files are mounted`},
	}, {
		name:        "unlabelled pod (objectSelector misconfigured): allowed unchanged, FencedLeases not read",
		cache:       failing,
		pod:         pod(func(p *corev1.Pod) { delete(p.Labels, fencingv1alpha1.LabelInject) }),
		wantAllowed: true,
	}, {
		name:        "already injected: allowed without a patch",
		cache:       reader(&dbLease),
		pod:         injected(true, nil),
		wantAllowed: true,
	}, {
		name:  "conflict: denied with the message",
		cache: reader(&dbLease),
		pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}),
		wantCode:    403,
		wantMessage: `cannot mount the fencedlease token files into pod "ns/db-0": volume "fencedlease-token" already exists with a different source; the name is reserved for the token files`,
	}, {
		name:        "FencedLeases cannot be read: error, so that failurePolicy Fail applies",
		cache:       failing,
		pod:         pod(nil),
		wantCode:    500,
		wantMessage: "list FencedLeases in namespace ns: cache is down",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			h := &Handler{Reader: tt.cache, LiveReader: tt.live, Decoder: admission.NewDecoder(s)}
			req := createRequest(t, tt.pod, tt.extraSpec)
			resp := h.Handle(context.Background(), req)
			g.Expect(resp.Allowed).To(Equal(tt.wantAllowed))
			g.Expect(resp.Warnings).To(Equal(tt.wantWarnings))
			if !tt.wantAllowed {
				g.Expect(resp.Result.Code).To(Equal(tt.wantCode))
				g.Expect(resp.Result.Message).To(Equal(tt.wantMessage))
			}
			if !tt.wantPatched {
				g.Expect(resp.Patches).To(BeEmpty())
				return
			}
			for _, op := range resp.Patches {
				g.Expect(op.Operation).To(Equal("add"), "patch %v", op)
			}
			// The patch applied to the request gives the injected pod and
			// keeps the unknown field.
			raw, err := json.Marshal(resp.Patches)
			g.Expect(err).NotTo(HaveOccurred())
			patched := applyPatch(g, req.Object.Raw, raw)
			if tt.extraSpec != nil {
				g.Expect(string(patched)).To(ContainSubstring(`"fieldFromTheFuture":{"x":1}`))
			}
			got := &corev1.Pod{}
			g.Expect(json.Unmarshal(patched, got)).To(Succeed())
			g.Expect(got).To(Equal(injected(true, nil)))
		})
	}
}

func applyPatch(g Gomega, doc, patch []byte) []byte {
	p, err := jsonpatch.DecodePatch(patch)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := p.Apply(doc)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}
