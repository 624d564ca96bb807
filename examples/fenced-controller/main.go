package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// fieldManager names the controller's writes.
const fieldManager = "widget-controller"

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(examplesv1alpha1.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, fencedLease, shardSet string
	var shards int
	var shardsDir string
	var enableLeaderElection bool
	var resync, lateWrites time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to (0: no metrics).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.StringVar(&fencedLease, "fenced-lease", "",
		"Run as a candidate of this FencedLease (in the pod's namespace): the controller runs only while the pod holds it, and its writes carry its fence.")
	flag.StringVar(&shardSet, "fenced-shard-set", "",
		"Run as one of the pods of this FencedShardSet (in the pod's namespace): each replica reconciles the Widgets of the shards its pod holds, and each write carries its Widget's shard's fence.")
	flag.IntVar(&shards, "shards", 0, "With --fenced-shard-set: the set's spec.shards; a Widget's shard is the hash of its name.")
	flag.StringVar(&shardsDir, "shards-dir", fence.DefaultDir, "With --fenced-shard-set: the directory of the pod's shards file.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Use controller-runtime's leader election instead (not with --fenced-lease).")
	flag.DurationVar(&resync, "resync", 10*time.Second, "How often each Widget is reconciled again.")
	flag.DurationVar(&lateWrites, "late-writes", 0,
		"Once the manager stops because this replica lost its grant or election, keep writing the Widgets for this long, as a replica that does not notice would (a demonstration; 0: off).")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	pod, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if namespace == "" {
		setupLog.Error(errors.New("$POD_NAMESPACE is not set"), "Set it from the downward API (metadata.namespace)")
		os.Exit(1)
	}
	cfg := ctrl.GetConfigOrDie()
	mopts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
	}
	var mgr ctrl.Manager
	var sharded *fencedcontroller.ShardedManager
	var err error
	switch {
	case fencedLease != "" && enableLeaderElection, fencedLease != "" && shardSet != "", shardSet != "" && enableLeaderElection:
		err = errors.New("--fenced-lease, --fenced-shard-set and --leader-elect exclude each other")
	case shardSet != "" && shards <= 0:
		err = errors.New("--fenced-shard-set needs --shards, the set's spec.shards")
	case shardSet != "":
		sharded, err = fencedcontroller.NewShardedManager(cfg, mopts, fencedcontroller.ShardedOptions{
			Set: shardSet, Namespace: namespace, ShardOf: fencedcontroller.ShardByName(shards), Dir: shardsDir, FieldManager: fieldManager})
		mgr = sharded
	case fencedLease != "":
		mgr, err = fencedcontroller.NewManager(cfg, mopts, fencedcontroller.Options{Lease: fencedLease, Namespace: namespace})
	default:
		mopts.LeaderElection = enableLeaderElection
		mopts.LeaderElectionID = "widget-controller.examples.fencedlease.io"
		mopts.LeaderElectionNamespace = namespace
		mgr, err = ctrl.NewManager(cfg, mopts)
	}
	if err != nil {
		setupLog.Error(err, "Unable to start manager")
		os.Exit(1)
	}

	r := &WidgetReconciler{Client: client.WithFieldOwner(mgr.GetClient(), fieldManager), Pod: pod, ProtectedBy: fencedLease, Resync: resync}
	if sharded != nil {
		r.ProtectedBy, r.Sharded = shardSet, sharded
	}
	if err := r.SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Unable to create controller", "controller", "Widget")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager")
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "Problem running manager")
		if lateWrites > 0 && sharded == nil {
			writeLate(ctx, cfg, r, fencedLease, namespace, pod, lateWrites)
		}
		os.Exit(1)
	}
}

// writeLate runs the late writer of --late-writes with the client the
// controller used: the fencing client, with the fence of the grant it held
// last, or the plain one.
func writeLate(ctx context.Context, cfg *rest.Config, r *WidgetReconciler, lease, namespace, pod string, d time.Duration) {
	plain, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		setupLog.Error(err, "Unable to create a client for the late writes")
		return
	}
	l := &lateWriter{log: ctrl.Log.WithName("late"), reader: plain, writer: client.WithFieldOwner(plain, fieldManager),
		ns: namespace, pod: pod, fence: r.lastFence.Load()}
	if lease != "" {
		g := staleGrant(fence.Grant{Lease: lease, Fence: l.fence})
		l.writer = client.WithFieldOwner(fencedcontroller.NewClient(plain, g, fencedcontroller.ClientOptions{FieldManager: fieldManager}), fieldManager)
	}
	l.run(ctx, d)
}
