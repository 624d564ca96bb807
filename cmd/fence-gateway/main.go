package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencedlease/fencedlease/internal/gateway"
	"github.com/fencedlease/fencedlease/internal/setup"
)

type flags struct {
	config          string
	listen          string
	metrics         string
	tlsCert, tlsKey string
	upstream        string
	region          string
	audiences       stringList
	tokenTTL        time.Duration
	tokenCache      int
	unknownTokens   float64
	keyLockTimeout  time.Duration
	grantMaxAge     time.Duration
	bodyIdle        time.Duration
	bodyTimeout     time.Duration
	reviewTimeout   time.Duration
	maxInFlight     int
	upstreamTimeout time.Duration
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags() (flags, zap.Options) {
	var f flags
	flag.StringVar(&f.config, "config", "/etc/fence-gateway/config.yaml", "Routing file: which bucket and key prefix belongs to which FencedLease (docs/storage.md).")
	flag.StringVar(&f.listen, "listen", ":8080", "Address of the S3 endpoint.")
	flag.StringVar(&f.metrics, "metrics-bind-address", ":8081", "Address of /metrics, /healthz and /readyz (plain HTTP); \"0\" turns it off.")
	flag.StringVar(&f.tlsCert, "tls-cert-file", "", "Certificate of the S3 endpoint; with --tls-key-file it serves HTTPS (tokens travel in headers: use TLS outside a trusted network).")
	flag.StringVar(&f.tlsKey, "tls-key-file", "", "Key of --tls-cert-file.")
	flag.StringVar(&f.upstream, "upstream-endpoint", "", "Base URL of the S3-compatible store (path-style addressing). Its credentials come from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN.")
	flag.StringVar(&f.region, "upstream-region", "us-east-1", "Region the upstream requests are signed for.")
	flag.Var(&f.audiences, "token-audience", "An audience the callers' tokens must be issued for (repeatable); none accepts the API server's own.")
	flag.DurationVar(&f.tokenTTL, "token-review-ttl", 10*time.Second, "How long a TokenReview's answer is reused for the same token.")
	flag.IntVar(&f.tokenCache, "token-review-cache-size", 4096, "How many accepted TokenReview answers are kept at most (rejected ones are kept apart, 1024 at most, so that random tokens never evict a holder's).")
	flag.Float64Var(&f.unknownTokens, "unknown-tokens-per-second", 20, "How many tokens with no remembered answer are reviewed a second per client address (burst: twice that); beyond it the answer is 503 SlowDown.")
	flag.DurationVar(&f.reviewTimeout, "token-review-timeout", 5*time.Second, "The longest one TokenReview may take.")
	flag.DurationVar(&f.keyLockTimeout, "key-lock-timeout", gateway.DefaultKeyLockTimeout, "The longest a write waits for another write to the same key in this replica (then 503 SlowDown); a newer grant's write never waits for an older one's upload.")
	flag.DurationVar(&f.grantMaxAge, "grant-max-age", gateway.DefaultGrantMaxAge, "The oldest the grant read that admitted a write may be when the write's last byte goes to the store; an older one is read again first.")
	flag.DurationVar(&f.bodyIdle, "body-idle-timeout", gateway.DefaultBodyIdleTimeout, "The longest a request body may send nothing (then RequestTimeout, nothing written); negative: no limit.")
	flag.DurationVar(&f.bodyTimeout, "body-timeout", gateway.DefaultBodyTimeout, "The longest a request body may take from the request's arrival; negative: no limit.")
	flag.IntVar(&f.maxInFlight, "max-in-flight", gateway.DefaultMaxInFlight, "Requests served at once; more are answered 503 SlowDown.")
	flag.DurationVar(&f.upstreamTimeout, "upstream-response-timeout", 30*time.Second, "How long to wait for the store's response headers.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	return f, opts
}

func main() {
	f, zo := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	if err := run(f); err != nil {
		ctrl.Log.Error(err, "fence-gateway failed")
		os.Exit(1)
	}
}

func run(f flags) error {
	log := ctrl.Log.WithName("fence-gateway")
	cfg, err := gateway.LoadConfig(f.config)
	if err != nil {
		return err
	}
	if f.upstream == "" {
		return errors.New("--upstream-endpoint is required")
	}
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" || secret == "" {
		return errors.New("the upstream credentials are missing: set $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY")
	}
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN"), Source: "environment"}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = f.upstreamTimeout
	transport.MaxIdleConnsPerHost = 64
	up, err := gateway.NewUpstream(f.upstream, f.region,
		aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil }), &http.Client{Transport: transport})
	if err != nil {
		return err
	}

	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("configuration of the Kubernetes API: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	reader, err := client.New(restCfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := gateway.NewMetrics(reg)
	if err != nil {
		return err
	}
	handler := gateway.New(gateway.Options{
		Config:   cfg,
		Upstream: up,
		Reviewer: &gateway.TokenReviewer{Client: kube, Audiences: f.audiences, TTL: f.tokenTTL, MaxAccepted: f.tokenCache,
			UnknownPerSecond: f.unknownTokens, UnknownBurst: int(2 * f.unknownTokens), Timeout: f.reviewTimeout, Metrics: metrics},
		Grants:   &gateway.GrantReader{Kube: kube, Client: reader, FencedLeaseTTL: 30 * time.Second, MaxFencedLeases: 4096},
		Recorder: broadcaster.NewRecorder(setup.Scheme(), "fence-gateway"),
		Metrics:  metrics, Log: log, MaxInFlight: f.maxInFlight,
		KeyLockTimeout: f.keyLockTimeout, GrantMaxAge: f.grantMaxAge, BodyIdleTimeout: f.bodyIdle, BodyTimeout: f.bodyTimeout,
	})
	srv := &http.Server{Addr: f.listen, Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	// Listen before saying so: a client that waits for the line finds the
	// port open.
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	errs := make(chan error, 2)
	log.Info("Serving S3", "address", ln.Addr().String(), "routes", len(cfg.Routes), "upstream", f.upstream)
	go func() {
		if f.tlsCert != "" {
			errs <- srv.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			errs <- srv.Serve(ln)
		}
	}()
	var msrv *http.Server
	if f.metrics != "0" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
		mux.HandleFunc("/healthz", ok)
		mux.HandleFunc("/readyz", ok)
		msrv = &http.Server{Addr: f.metrics, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- msrv.ListenAndServe() }()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if msrv != nil {
		_ = msrv.Shutdown(sctx)
	}
	return srv.Shutdown(sctx)
}
