package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const usage = `kubectl fence: see and steer FencedLeases and FencedShardSets.

Usage:
  kubectl fence status [NAME] [-n NAMESPACE | -A]   leases, holders, fences, time to expiry, renewal mode
  kubectl fence shards NAME [-n NAMESPACE]         a FencedShardSet: its pods' shares, and each shard's owner, fence and state
  kubectl fence handoff NAME [--wait=false] [--timeout=2m]
                                                   hand the grant over to another eligible candidate
  kubectl fence explain-denial MESSAGE|configmap/NAME|secret/NAME
                                                   why the fencing webhook rejected a write, and what to do

Flags:
`

func main() {
	ctx := context.Background()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// options are the parsed command line.
type options struct {
	command       string
	args          []string
	allNamespaces bool
	wait          bool
	timeout       time.Duration
	namespace     string
	// connect returns a client of the cluster; explain-denial of a message
	// needs none.
	connect func() (client.Client, error)
	now     func() time.Time
}

// errUsage is a command line that names no command.
var errUsage = errors.New("a command is needed: status, shards, handoff or explain-denial (kubectl fence --help)")

// run parses the command line, connects to the cluster as kubectl would, and
// runs the command.
func run(ctx context.Context, argv []string, out io.Writer) error {
	fs := pflag.NewFlagSet("kubectl-fence", pflag.ContinueOnError)
	fs.SetOutput(out)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file.")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	o := options{now: time.Now}
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "status: every namespace.")
	fs.BoolVar(&o.wait, "wait", true, "handoff: wait until another pod holds the lease.")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "handoff: how long to wait.")
	fs.Usage = func() { fmt.Fprint(out, usage); fs.PrintDefaults() }
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 {
		return errUsage
	}
	o.command, o.args = fs.Arg(0), fs.Args()[1:]
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	ns, _, err := cc.Namespace()
	if err != nil {
		return fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	o.namespace = ns
	o.connect = func() (client.Client, error) {
		cfg, err := cc.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("load the kubeconfig: %w", err)
		}
		scheme, err := newScheme()
		if err != nil {
			return nil, err
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", cfg.Host, err)
		}
		return c, nil
	}
	switch o.command {
	case "status":
		return status(ctx, o, out)
	case "shards":
		return shards(ctx, o, out)
	case "handoff":
		return handoff(ctx, o, out)
	case "explain-denial":
		return explainDenial(ctx, o, out)
	default:
		return fmt.Errorf("unknown command %q: want status, shards, handoff or explain-denial", o.command)
	}
}
