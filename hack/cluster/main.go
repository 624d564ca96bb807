package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
)

func main() {
	cfg := cluster.Config{Detached: true}
	flag.StringVar(&cfg.Dir, "dir", "bin/cluster", "State directory of the cluster.")
	flag.StringVar(&cfg.K8sBin, "k8s-bin", "", "Directory of etcd, kube-apiserver, kube-controller-manager and kube-scheduler (default bin/k8s/<K8S_VERSION of hack/versions.env>).")
	flag.StringVar(&cfg.Kwok, "kwok", "", "The kwok binary (default bin/tools/kwok-<KWOK_VERSION of hack/versions.env>).")
	realNodes := flag.Int("real-nodes", 2, "How many real nodes (a containerd and a kubelet each) run beside kwok's.")
	flag.StringVar(&cfg.Kubelet, "kubelet", "", "The real nodes' kubelet (default bin/k8s/<K8S_VERSION>/kubelet, or $FENCEDLEASE_KUBELET).")
	imagesDir := flag.String("images", "", "Directory of the image tarballs imported into the real nodes (default bin/images, or $FENCEDLEASE_IMAGES).")
	flag.BoolVar(&cfg.HA, "ha", false, "Start an HA control plane: three etcd members and two API servers behind a TCP balancer.")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [flags] up|down|status\n       %s balance --listen ADDR BACKEND...\n", os.Args[0], os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if flag.Arg(0) == "balance" {
		if err := balance(ctx, flag.Args()[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "cluster balance:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if cfg.K8sBin == "" {
		cfg.K8sBin = harness.ControlPlaneDir()
	}
	if cfg.Kwok == "" {
		cfg.Kwok = harness.Tool("kwok")
	}
	if cfg.Kubelet == "" {
		cfg.Kubelet = harness.Kubelet()
	}
	if *imagesDir == "" {
		*imagesDir = harness.ImagesDir()
	}
	for i := range *realNodes {
		cfg.RealNodes = append(cfg.RealNodes, fmt.Sprintf("real-node-%d", i+1))
	}
	if *realNodes > 0 {
		cfg.Images = cluster.ImageTarballs(*imagesDir)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
	cfg.BalancerBin = self
	if err := run(ctx, flag.Arg(0), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, cfg cluster.Config) error {
	for _, p := range []*string{&cfg.K8sBin, &cfg.Kwok, &cfg.Kubelet} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	c, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	switch cmd {
	case "up":
		return up(ctx, c)
	case "down":
		if err := c.Down(); err != nil {
			return err
		}
		fmt.Printf("The local cluster in %s is stopped; no process of it runs.\n", c.Dir)
		return nil
	case "status":
		return status(ctx, c)
	default:
		return fmt.Errorf("unknown command %q: want up, down or status", cmd)
	}
}

func up(ctx context.Context, c *cluster.Cluster) error {
	if c.Running(ctx) {
		fmt.Printf("The local cluster in %s is already running.\n", c.Dir)
		fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
		return nil
	}
	if c.HA {
		fmt.Printf("==> Starting the local HA cluster in %s: three etcd members, two kube-apiservers behind a TCP balancer,\n", c.Dir)
		fmt.Printf("    kube-controller-manager, kube-scheduler, and kwok simulating %d nodes (%s) and their pods.\n", len(c.Nodes), strings.Join(c.Nodes, ", "))
	} else {
		fmt.Printf("==> Starting the local cluster in %s: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,\n", c.Dir)
		fmt.Printf("    and kwok simulating %d nodes (%s) and their pods.\n", len(c.Nodes), strings.Join(c.Nodes, ", "))
	}
	if len(c.RealNodes) > 0 {
		fmt.Printf("    Real nodes: %s, a containerd and a kubelet of this machine each, their state and mounts under %s/nodes;\n",
			strings.Join(c.RealNodes, ", "), c.Dir)
		fmt.Printf("    their pods run as real containers, on a pod network of the cluster's own bridge (docs/cluster.md).\n")
	}
	start := time.Now()
	if _, err := c.Up(ctx); err != nil {
		return err
	}
	fmt.Printf("==> The local cluster is up (%.1fs); a node is marked lost %s after its last heartbeat.\n",
		time.Since(start).Seconds(), c.NodeMonitorGracePeriod)
	if len(c.RealNodes) > 0 {
		fmt.Printf("    A pod runs on a real node when it selects the label %s=real and tolerates the taint %s;\n", cluster.RealNodeLabel, cluster.RealNodeTaint)
		fmt.Printf("    the others run on kwok's simulated nodes, where no container runs.\n")
	} else {
		fmt.Printf("    %s\n", cluster.NoContainers)
	}
	fmt.Printf("    Stop it with: make cluster-down\n")
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	return nil
}

func status(ctx context.Context, c *cluster.Cluster) error {
	procs := c.Processes()
	if len(procs) == 0 {
		fmt.Printf("The local cluster in %s is not running (make cluster starts it).\n", c.Dir)
		return nil
	}
	names := make([]string, 0, len(procs))
	for n := range procs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Printf("%-28s pid %-8d log %s\n", n, procs[n], c.LogFile(n))
	}
	if !c.Running(ctx) {
		fmt.Println("Some processes are missing or the API server is not ready: make cluster-down, then make cluster.")
		return nil
	}
	if c.HA {
		fmt.Printf("API servers: %s, through the balancer\n", c.RestConfig.Host)
	} else {
		fmt.Printf("API server: %s\n", c.RestConfig.Host)
	}
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range nodes.Items {
		state := "NotReady"
		if cluster.NodeReady(&nodes.Items[i]) {
			state = "Ready"
		}
		fmt.Printf("node %-16s %s\n", nodes.Items[i].Name, state)
	}
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	return nil
}

// balance runs the balancer of an HA cluster until it is stopped: --listen
// ADDR, then the API servers' addresses.
func balance(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("balance", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "Address to listen at.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no backend")
	}
	b, err := cluster.ListenBalancer(*listen, fs.Args()...)
	if err != nil {
		return err
	}
	fmt.Printf("Balancing %s over %s\n", b.Addr(), strings.Join(fs.Args(), ", "))
	<-ctx.Done()
	return b.Close()
}
