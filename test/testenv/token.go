package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
)

// PodToken returns a service-account token bound to the pod by the
// TokenRequest API, as the kubelet projects into a real pod.
func PodToken(ctx context.Context, cfg *rest.Config, pod *corev1.Pod) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("create clientset: %w", err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// PodClient returns a client that acts as the pod: it authenticates with a
// service-account token bound to the pod by the TokenRequest API, so the API
// server puts the pod's name and UID in the user info of every request,
// exactly as for a real pod's projected token.
func PodClient(ctx context.Context, cfg *rest.Config, pod *corev1.Pod) (client.Client, error) {
	token, err := PodToken(ctx, cfg, pod)
	if err != nil {
		return nil, err
	}
	pc := rest.AnonymousClientConfig(cfg)
	pc.BearerToken = token
	return client.New(pc, client.Options{Scheme: setup.Scheme()})
}
