package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
)

func main() {
	var o options
	cfg := cluster.Config{Detached: true}
	flag.StringVar(&cfg.Dir, "cluster-dir", "bin/cluster", "State directory of the local cluster.")
	flag.StringVar(&cfg.K8sBin, "k8s-bin", "", "Directory of etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (default bin/k8s/<K8S_VERSION of hack/versions.env>).")
	flag.StringVar(&cfg.Kwok, "kwok", "", "The kwok binary (default bin/tools/kwok-<KWOK_VERSION of hack/versions.env>).")
	flag.StringVar(&cfg.Kubelet, "kubelet", "", "The real nodes' kubelet (default bin/k8s/<K8S_VERSION>/kubelet).")
	flag.StringVar(&cfg.BalancerBin, "cluster-command", "bin/cluster-command", "The cluster command (make cluster-command): it forwards the pod network's kubernetes Service to the API server.")
	imagesDir := flag.String("images", "", "The image tarballs' directory (default bin/images; make images).")
	realNodes := flag.Int("real-nodes", 2, "Real nodes to start with the cluster (the workload scene needs two).")
	flag.StringVar(&o.helm, "helm", "", "The helm binary (default bin/tools/helm-<HELM_VERSION of hack/versions.env>).")
	flag.StringVar(&o.manager, "manager", "bin/manager", "The operator binary (make build).")
	flag.StringVar(&o.chart, "chart", "charts/fencedlease", "The operator's Helm chart.")
	flag.StringVar(&o.scene, "scene", sceneWorkload, "What to show: "+sceneWorkload+" (a Deployment's pods and their writes) or "+
		sceneController+" (the example fenced controller in two replica processes, one paused) or "+sceneShards+" (a FencedShardSet's 64 shards over three pods).")
	flag.StringVar(&o.example, "example", "bin/fenced-controller", "The example fenced controller's binary (scene "+sceneController+").")
	flag.StringVar(&o.exampleConfig, "example-config", "examples/fenced-controller/config", "The example's manifests: crd/, rbac/, deploy/.")
	flag.BoolVar(&o.clientGo, "clientgo", true, "Scene "+sceneController+": show the same pause on client-go's leader election too (about 40s more).")
	flag.Parse()
	if cfg.K8sBin == "" {
		cfg.K8sBin = harness.ControlPlaneDir()
	}
	if cfg.Kwok == "" {
		cfg.Kwok = harness.Tool("kwok")
	}
	if o.helm == "" {
		o.helm = harness.Tool("helm")
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
	cfg.Images = cluster.ImageTarballs(*imagesDir)
	for _, p := range []*string{&cfg.K8sBin, &cfg.Kwok, &cfg.Kubelet, &cfg.BalancerBin, &o.helm, &o.manager, &o.chart, &o.example, &o.exampleConfig} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		*p = abs
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 10*time.Minute)
	defer cancelTimeout()
	if err := run(ctx, cfg, o); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

type options struct {
	helm, manager, chart string
	scene                string
	// example is the example fenced controller's binary, clientGo whether
	// the controller scene shows client-go's leader election too.
	example, exampleConfig string
	clientGo               bool
}

// The scenes.
const (
	sceneWorkload   = "workload"
	sceneController = "controller"
	sceneShards     = "shards"
)

const (
	release   = "fencedlease"
	namespace = "fencedlease-system"
)

func run(ctx context.Context, cfg cluster.Config, o options) error {
	ctrllog.SetLogger(logr.Discard())
	switch o.scene {
	case sceneWorkload:
		fmt.Println(intro)
	case sceneController:
		fmt.Println(controllerIntro)
	case sceneShards:
		fmt.Println(shardsIntro)
	default:
		return fmt.Errorf("unknown scene %q: want %s or %s", o.scene, sceneWorkload, sceneController)
	}
	d, err := startCluster(ctx, cfg)
	if err != nil {
		return err
	}
	switch o.scene {
	case sceneController:
		return d.controllerScene(o)
	case sceneShards:
		return d.shardsScene(o)
	}
	return d.workloadScene(o)
}

// startCluster starts the local cluster unless it runs, and connects.
func startCluster(ctx context.Context, cfg cluster.Config) (*demo, error) {
	c, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	d := &demo{ctx: ctx, cl: c, kubectl: filepath.Join(cfg.K8sBin, "kubectl"), start: time.Now()}

	d.step("The local cluster")
	started, err := c.Up(ctx)
	if err != nil {
		return nil, err
	}
	if started {
		d.say("Started etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (%d simulated nodes)", len(c.Nodes))
		d.say("and %d real nodes: a containerd and a kubelet of this machine each, with a pod network.", len(c.RealNodes))
	} else {
		d.say("Already running (make cluster): reused.")
	}
	if d.c, err = client.New(c.RestConfig, client.Options{Scheme: setup.Scheme()}); err != nil {
		return nil, err
	}
	if d.realNodes, err = c.RealNodeNames(ctx); err != nil {
		return nil, err
	}
	explain("Real nodes %v run the operator and the workload as real containers; kwok's simulated nodes run no container.", d.realNodes)
	if err := c.RestoreNodes(ctx, time.Minute); err != nil {
		return nil, err
	}
	return d, nil
}

// installOperator installs the chart, with helmArgs, and (re)starts the
// local operator process.
func (d *demo) installOperator(o options, helmArgs ...string) error {
	in, err := d.cl.InstallChart(d.ctx, o.helm, o.chart, release, namespace, helmArgs...)
	if err != nil {
		return err
	}
	d.say("helm upgrade --install %s %s --namespace %s: CRD, RBAC, webhook configurations, admission policy.", release, rel(o.chart), namespace)
	if len(helmArgs) > 0 {
		explain("with %s", strings.Join(quote(helmArgs), " "))
	}
	return d.startOperator(in, o.manager)
}

// rel is path relative to the working directory (the repository's root
// under make), for the narration.
func rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if r, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// quote puts shell quotes around the arguments that need them.
func quote(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " {}[]\"'") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

// workloadScene is make demo: a Deployment's pods compete for a
// FencedLease and write a protected ConfigMap.
func (d *demo) workloadScene(o options) error {
	if len(d.realNodes) < 2 {
		return fmt.Errorf("the running cluster has %d real nodes, the demo needs two: make cluster-down, then make demo (or make cluster REAL_NODES=2)", len(d.realNodes))
	}
	d.step("Installing the operator from the Helm chart, in the cluster")
	if err := d.installInCluster(o); err != nil {
		return err
	}
	if err := d.scenario(); err != nil {
		d.dump()
		return err
	}
	d.summary()
	d.lookAround()
	return nil
}

const shardsIntro = `fencedlease demo: fenced shards
===============================
A sharded workload (a worker per tenant, a consumer per partition) needs one owner per shard at a
time, spread over the pods that are alive. A FencedShardSet grants each shard to one pod with a
fence of its own that grows with every move, and the API server rejects a write to a shard's
objects that does not carry that shard's current fence from its current owner.`

const intro = `fencedlease demo
================
A singleton workload runs several replicas, but only one of them, the holder, may act at a time:
write the export, run the job, own the data. Kubernetes has no such lock that a slow or cut-off
replica cannot outlive. fencedlease grants a Lease to one pod at a time and gives it a fence: a
number that grows with every new holder. Every protected write carries its writer's fence, and the
API server itself (through the operator's webhook) rejects a write whose fence is no longer the
current one. A holder that was paused, cut off or replaced can still try to write: it is refused.`
