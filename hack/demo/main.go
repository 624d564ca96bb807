package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/cluster"
)

func main() {
	var o options
	cfg := cluster.Config{Detached: true}
	flag.StringVar(&cfg.Dir, "cluster-dir", "bin/cluster", "State directory of the local cluster.")
	flag.StringVar(&cfg.K8sBin, "k8s-bin", "bin/k8s/1.37.2", "Directory of etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.")
	flag.StringVar(&cfg.Kwok, "kwok", "bin/tools/kwok-v0.8.0", "The kwok binary.")
	flag.StringVar(&o.helm, "helm", "bin/tools/helm-v3.22.0", "The helm binary.")
	flag.StringVar(&o.manager, "manager", "bin/manager", "The operator binary (make build).")
	flag.StringVar(&o.chart, "chart", "charts/fencedlease", "The operator's Helm chart.")
	flag.Parse()
	for _, p := range []*string{&cfg.K8sBin, &cfg.Kwok, &o.helm, &o.manager, &o.chart} {
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
}

const (
	release   = "fencedlease"
	namespace = "fencedlease-system"
)

func run(ctx context.Context, cfg cluster.Config, o options) error {
	ctrllog.SetLogger(logr.Discard())
	fmt.Println(intro)
	c, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, cl: c, kubectl: filepath.Join(cfg.K8sBin, "kubectl"), start: time.Now()}

	d.step("The local cluster")
	started, err := c.Up(ctx)
	if err != nil {
		return err
	}
	if started {
		d.say("Started etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (%d simulated nodes).", len(c.Nodes))
	} else {
		d.say("Already running (make cluster): reused.")
	}
	d.say("%s", cluster.NoContainers)
	if d.c, err = client.New(c.RestConfig, client.Options{Scheme: setup.Scheme()}); err != nil {
		return err
	}
	if err := c.RestoreNodes(ctx, time.Minute); err != nil {
		return err
	}

	d.step("Installing the operator from the Helm chart")
	in, err := c.InstallChart(ctx, o.helm, o.chart, release, namespace)
	if err != nil {
		return err
	}
	d.say("helm upgrade --install %s %s --namespace %s: CRD, RBAC, webhook configurations, admission policy.", release, o.chart, namespace)
	if err := d.startOperator(in, o.manager); err != nil {
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

const intro = `fencedlease demo
================
A singleton workload runs several replicas, but only one of them, the holder, may act at a time:
write the export, run the job, own the data. Kubernetes has no such lock that a slow or cut-off
replica cannot outlive. fencedlease grants a Lease to one pod at a time and gives it a fence: a
number that grows with every new holder. Every protected write carries its writer's fence, and the
API server itself (through the operator's webhook) rejects a write whose fence is no longer the
current one. A holder that was paused, cut off or replaced can still try to write: it is refused.`
