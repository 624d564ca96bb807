package fence_test

import (
	"context"
	"fmt"
	"os"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fence/fencetest"
)

// configMap stands in for a corev1.ConfigMap, which satisfies fence.Annotated.
type configMap struct{ annotations map[string]string }

func (c *configMap) GetAnnotations() map[string]string  { return c.annotations }
func (c *configMap) SetAnnotations(a map[string]string) { c.annotations = a }

// The workload waits until it holds the lease, works under a context that is
// cancelled when holdership ends, and stamps its fence on every write.
func Example() {
	// In a pod the operator mounts the files at fence.DefaultDir; here a
	// test helper publishes them the way the kubelet does.
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	kubelet, _ := fencetest.NewKubeletWriter(dir)
	_ = kubelet.Holder(42, "invoice-export")

	w, err := fence.New(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()

	ctx, tok, err := w.HolderContext(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holding:", tok)

	cm := &configMap{}
	if err := fence.Stamp(cm, tok); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("write with", fence.Annotation, "=", cm.annotations[fence.Annotation])

	// The operator moves the lease to another pod.
	_ = kubelet.Standby("invoice-export")
	<-ctx.Done()
	fmt.Println("stop:", context.Cause(ctx))
	// Output:
	// holding: holder of "invoice-export" with fence 42
	// write with fencedlease.io/fence = 42
	// stop: holdership lost: role is now standby
}
