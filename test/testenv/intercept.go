package testenv

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Intercept wraps a manager's client with controller-runtime's interceptor,
// to inject faults such as a write that is applied but whose response is lost.
func Intercept(c client.Client, funcs interceptor.Funcs) client.Client {
	return interceptor.NewClient(noWatch{c}, funcs)
}

// noWatch adapts a client.Client to the client.WithWatch that the
// interceptor wraps; the operator never watches through its client.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch is not supported by this test client")
}
