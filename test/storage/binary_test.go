package storage_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func freeAddr(g Gomega) string {
	addr, err := harness.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	return addr
}

// TestGatewayBinary runs cmd/fence-gateway as a process, as the chart does:
// routes from a file, the store's credentials from the environment, the
// API server through a kubeconfig of the gateway's service account. The
// holder's write passes, a standby's is refused, /metrics counts both, and
// SIGTERM stops it cleanly.
func TestGatewayBinary(t *testing.T) {
	needsServers(t)
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fence-gateway")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fencedlease/fencedlease/cmd/fence-gateway").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	ns := namespace(t, "gwbin")
	bucket := ns
	g.Expect(store.CreateBucket(ctx, bucket)).To(Succeed())
	labels := map[string]string{"app": "exporter"}
	g.Expect(env.Client.Create(ctx, testenv.FencedLease(ns, "exporter", labels, nil))).To(Succeed())
	holder := readyPod(t, ns, "holder", labels, time.Hour)
	standby := readyPod(t, ns, "standby", labels, time.Minute)
	f := grantOf(g, ns, "exporter", holder)
	hTok, err := testenv.PodToken(ctx, env.Config, holder)
	g.Expect(err).NotTo(HaveOccurred())
	sTok, err := testenv.PodToken(ctx, env.Config, standby)
	g.Expect(err).NotTo(HaveOccurred())

	config := filepath.Join(dir, "config.yaml")
	g.Expect(os.WriteFile(config, fmt.Appendf(nil, "routes:\n- bucket: %s\n  namespace: %s\n  fencedLease: exporter\n", bucket, ns), 0o600)).To(Succeed())
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"envtest": {Server: gatewayConfig.Host, CertificateAuthorityData: gatewayConfig.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"fence-gateway": {Token: gatewayConfig.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"envtest": {Cluster: "envtest", AuthInfo: "fence-gateway"}},
		CurrentContext: "envtest",
	}, kubeconfig)).To(Succeed())
	listen, metrics := freeAddr(g), freeAddr(g)
	cmd := exec.Command(bin, "--config", config, "--listen", listen, "--metrics-bind-address", metrics, "--upstream-endpoint", store.Endpoint)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "AWS_ACCESS_KEY_ID="+store.AccessKey, "AWS_SECRET_ACCESS_KEY="+store.SecretKey)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	g.Expect(cmd.Start()).To(Succeed())
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("fence-gateway:\n%s", logs.String())
		}
	})
	g.Eventually(func() error {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}).WithTimeout(timeout).Should(Succeed())

	url := "http://" + listen + "/" + bucket + "/report.csv"
	put := func(token string) int {
		status, _, _ := raw(g, http.MethodPut, url, map[string]string{gateway.HeaderToken: token, gateway.HeaderFence: strconv.FormatInt(f, 10)}, "report")
		return status
	}
	g.Expect(put(hTok)).To(Equal(http.StatusOK))
	g.Expect(put(sTok)).To(Equal(http.StatusForbidden))

	resp, err := http.Get("http://" + metrics + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(ContainSubstring(`fencedlease_gateway_requests_total{operation="put",reason="holder",result="allowed"} 1`))
	g.Expect(string(body)).To(ContainSubstring(`fencedlease_gateway_requests_total{operation="put",reason="not_holder",result="denied"} 1`))

	g.Expect(cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	select {
	case err := <-exited:
		g.Expect(err).NotTo(HaveOccurred(), "a clean exit on SIGTERM")
	case <-time.After(timeout):
		t.Fatal("fence-gateway did not stop on SIGTERM")
	}
}
