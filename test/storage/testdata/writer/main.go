// Command writer acts as a pod that writes to object storage with its
// fence, through the fence gateway (any S3 SDK with two extra headers) or
// with package fences3 (a fenced pointer), as test/storage runs it. It
// authenticates to the API server and to the gateway with the pod's bound
// service-account token ($FENCE_SERVICEACCOUNT_DIR/token).
//
// MODE=seeds holds its lease with pkg/fence's Session (holder renewal),
// prints "holder <fence>" once it holds, then for every "write <content>"
// line on stdin writes <content> to $KEY with that fence, whatever happened
// since (a paused holder resumes with the fence it had), and prints
// "result <outcome> <code> <message>".
//
// MODE=chaos writes $WRITES times (or until $DURATION passes) to one of
// $KEYS keys, alternating the gateway (a random one of the replicas in
// $GATEWAY, comma-separated) and fences3 ($STORE): it
// reads its Lease, waits a moment (a pause may fall there), then writes
// with the fence it believed, and sometimes, when it does not hold the
// lease, with its last fence or the current one anyway. Through the
// gateway it sometimes sends the key as a path alias (refused), deletes
// the key (a tombstone, re-created by later writes), or trickles its body
// with a pause in the middle (across a takeover, now and then); with
// fences3 it sometimes replays an operation at once or long after, as a
// caller does after ErrUnknownOutcome. Every attempt is one JSON line of
// $HISTORY with its kind, call and return times and outcome.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fence/fences3"
)

func main() {
	var err error
	switch os.Getenv("MODE") {
	case "seeds":
		err = seeds()
	case "chaos":
		err = chaos()
	default:
		err = fmt.Errorf("MODE must be seeds or chaos")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

// writer writes one way or both.
type writer struct {
	token    string
	bucket   string
	gateways []*s3.Client
	store    *fences3.Store
}

func newWriter() (*writer, error) {
	tok, err := os.ReadFile(filepath.Join(os.Getenv("FENCE_SERVICEACCOUNT_DIR"), "token"))
	if err != nil {
		return nil, err
	}
	w := &writer{token: strings.TrimSpace(string(tok)), bucket: os.Getenv("BUCKET")}
	// $GATEWAY lists gateway replicas; each write picks one. The gateway
	// does not check the SDK's own signature: any credentials do.
	for ep := range strings.SplitSeq(os.Getenv("GATEWAY"), ",") {
		if ep != "" {
			w.gateways = append(w.gateways, client(ep, "unused", "unused"))
		}
	}
	if ep := os.Getenv("STORE"); ep != "" {
		w.store = fences3.New(client(ep, os.Getenv("STORE_ACCESS_KEY"), os.Getenv("STORE_SECRET_KEY")), os.Getenv("STORE_BUCKET"))
	}
	return w, nil
}

func client(endpoint, key, secret string) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, nil
		})})
}

// outcome of one write.
type outcome struct {
	Result  string // accepted, rejected, failed (not applied) or unknown
	Code    string
	Message string
}

// viaGateway PUTs content with the pod's token and fence as two headers.
func (w *writer) viaGateway(ctx context.Context, key string, f int64, content string) outcome {
	return w.gatewayCall(ctx, f, func(gw *s3.Client, opt func(*s3.Options)) error {
		_, err := gw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.bucket), Key: aws.String(key), Body: strings.NewReader(content)}, opt)
		return err
	})
}

// slowly PUTs content with a pause of pause in the middle of its body
// (unsigned payload: the SDK cannot hash a body it cannot seek).
func (w *writer) slowly(ctx context.Context, key string, f int64, content string, pause time.Duration) outcome {
	return w.gatewayCall(ctx, f, func(gw *s3.Client, opt func(*s3.Options)) error {
		body := &pausing{first: content[:len(content)/2], rest: content[len(content)/2:], pause: pause}
		_, err := gw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.bucket), Key: aws.String(key), Body: body,
			ContentLength: aws.Int64(int64(len(content)))}, opt, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
		return err
	})
}

// remove DELETEs key (the gateway leaves a tombstone with the fence).
func (w *writer) remove(ctx context.Context, key string, f int64) outcome {
	return w.gatewayCall(ctx, f, func(gw *s3.Client, opt func(*s3.Options)) error {
		_, err := gw.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(w.bucket), Key: aws.String(key)}, opt)
		return err
	})
}

// pausing is a body that stops for pause half way, as a paused writer's
// upload does. It is not seekable: the SDK streams it.
type pausing struct {
	first, rest string
	pause       time.Duration
	paused      bool
}

func (p *pausing) Read(b []byte) (int, error) {
	if p.first != "" {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	if !p.paused {
		p.paused = true
		time.Sleep(p.pause)
	}
	if p.rest == "" {
		return 0, io.EOF
	}
	n := copy(b, p.rest)
	p.rest = p.rest[n:]
	return n, nil
}

// gatewayCall sends call to a random gateway replica with the pod's token
// and fence f, no retries, and classifies its error.
func (w *writer) gatewayCall(ctx context.Context, f int64, call func(*s3.Client, func(*s3.Options)) error) outcome {
	gw := w.gateways[rand.IntN(len(w.gateways))]
	err := call(gw, func(o *s3.Options) {
		o.Retryer = aws.NopRetryer{}
		o.APIOptions = append(o.APIOptions,
			smithyhttp.AddHeaderValue("X-Fencedlease-Token", w.token),
			smithyhttp.AddHeaderValue("X-Fencedlease-Fence", strconv.FormatInt(f, 10)))
	})
	if err == nil {
		return outcome{Result: "accepted"}
	}
	var ae smithy.APIError
	var re *smithyhttp.ResponseError
	if errors.As(err, &ae) && errors.As(err, &re) {
		switch status := re.HTTPStatusCode(); {
		case status == 403 || status == 400 || status == 409:
			return outcome{Result: "rejected", Code: ae.ErrorCode(), Message: ae.ErrorMessage()}
		case status == 502 || status == 504:
			return outcome{Result: "unknown", Code: ae.ErrorCode(), Message: ae.ErrorMessage()}
		default:
			return outcome{Result: "failed", Code: ae.ErrorCode(), Message: ae.ErrorMessage()}
		}
	}
	return outcome{Result: "unknown", Code: "transport", Message: err.Error()}
}

// viaPointer writes content with fences3 as operation opID.
func (w *writer) viaPointer(ctx context.Context, key, opID string, f int64, content string) outcome {
	_, err := w.store.Put(ctx, key, opID, f, strings.NewReader(content))
	switch {
	case err == nil:
		return outcome{Result: "accepted", Code: "Applied"}
	case errors.Is(err, fences3.ErrAlreadyApplied):
		return outcome{Result: "accepted", Code: "AlreadyApplied", Message: err.Error()}
	case errors.Is(err, fences3.ErrOutcomeLost):
		return outcome{Result: "rejected", Code: "ErrOutcomeLost", Message: err.Error()}
	case errors.Is(err, fences3.ErrStale):
		return outcome{Result: "rejected", Code: "ErrStale", Message: err.Error()}
	case errors.Is(err, fences3.ErrContention):
		return outcome{Result: "failed", Code: "ErrContention", Message: err.Error()}
	}
	return outcome{Result: "unknown", Code: "error", Message: err.Error()}
}

func seeds() error {
	ctx := context.Background()
	w, err := newWriter()
	if err != nil {
		return err
	}
	margin, err := time.ParseDuration(os.Getenv("MARGIN"))
	if err != nil {
		return fmt.Errorf("MARGIN: %w", err)
	}
	s, err := fence.NewSession(ctx, fence.SessionConfig{Lease: os.Getenv("LEASE"), Margin: margin,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "fence: "+format+"\n", args...) }})
	if err != nil {
		return err
	}
	defer s.Close()
	g, err := s.WaitHolder(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("holder %d\n", g.Fence)
	in := bufio.NewScanner(os.Stdin)
	for n := 1; in.Scan(); n++ {
		content, ok := strings.CutPrefix(in.Text(), "write ")
		if !ok {
			continue
		}
		// The fence of the grant this holder started its work under, even
		// if it was paused since: the destination must tell.
		var o outcome
		if len(w.gateways) > 0 {
			o = w.viaGateway(ctx, os.Getenv("KEY"), g.Fence, content)
		} else {
			o = w.viaPointer(ctx, os.Getenv("KEY"), fmt.Sprintf("%s-%d", s.Pod(), n), g.Fence, content)
		}
		fmt.Printf("result %s %s %s\n", o.Result, o.Code, strings.ReplaceAll(o.Message, "\n", " "))
	}
	return in.Err()
}

// Attempt is one line of the history.
type Attempt struct {
	Pod     string `json:"pod"`
	UID     string `json:"uid"`
	Way     string `json:"way"`
	Kind    string `json:"kind"`
	Key     string `json:"key"`
	Path    string `json:"path,omitempty"`
	Op      string `json:"op"`
	Fence   int64  `json:"fence"`
	Holder  bool   `json:"holder"`
	Call    int64  `json:"call"`
	Return  int64  `json:"return"`
	Result  string `json:"result"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

func chaos() error {
	ctx := context.Background()
	w, err := newWriter()
	if err != nil {
		return err
	}
	dir := os.Getenv("FENCE_SERVICEACCOUNT_DIR")
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + os.Getenv("KUBERNETES_SERVICE_HOST") + ":" + os.Getenv("KUBERNETES_SERVICE_PORT"),
		BearerToken: w.token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: -1})
	if err != nil {
		return err
	}
	ns, err := os.ReadFile(filepath.Join(dir, "namespace"))
	if err != nil {
		return err
	}
	out, err := os.Create(os.Getenv("HISTORY"))
	if err != nil {
		return err
	}
	defer out.Close()
	enc := json.NewEncoder(out)
	writes, _ := strconv.Atoi(os.Getenv("WRITES"))
	keys, _ := strconv.Atoi(os.Getenv("KEYS"))
	duration, err := time.ParseDuration(os.Getenv("DURATION"))
	if err != nil {
		return err
	}
	pod, uid, lease := os.Getenv("POD"), os.Getenv("POD_UID"), os.Getenv("LEASE")
	deadline := time.Now().Add(duration)
	var last int64
	// past are this writer's earlier fences3 operations, replayed now and
	// then.
	type pointerOp struct {
		op, key, content string
		fence            int64
	}
	var past []pointerOp
	for n := 0; n < writes && time.Now().Before(deadline); {
		l, err := kube.CoordinationV1().Leases(string(ns)).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		current, _ := fence.ParseFence(l.Annotations["fencedlease.io/fence"])
		holder := l.Annotations["fencedlease.io/state"] == "held" && l.Annotations["fencedlease.io/holder-uid"] == uid && current > 0
		// A pause (SIGSTOP) may fall between the read and the write.
		time.Sleep(rand.N(15 * time.Millisecond))
		var f int64
		switch r := rand.Float64(); {
		case holder:
			f, last = current, current
		case last > 0 && r < 0.35:
			f = last // a holder that lost its grant and writes on
		case current > 0 && r < 0.5:
			f = current // a standby with the current fence
		default:
			time.Sleep(20 * time.Millisecond)
			continue
		}
		n++
		a := Attempt{Pod: pod, UID: uid, Fence: f, Holder: holder, Op: fmt.Sprintf("%s-%d", pod, n), Kind: "put"}
		content := a.Op
		a.Call = time.Now().UnixNano()
		var o outcome
		if n%2 == 0 && len(w.gateways) > 0 || w.store == nil {
			a.Way, a.Key = "gateway", fmt.Sprintf("k%d", rand.IntN(keys))
			switch r := rand.Float64(); {
			case r < 0.08:
				a.Kind, a.Path = "alias", aliasOf(a.Key)
				o = w.viaGateway(ctx, a.Path, f, content)
			case r < 0.2:
				a.Kind = "delete"
				o = w.remove(ctx, a.Key, f)
			case r < 0.3:
				a.Kind = "slow"
				o = w.slowly(ctx, a.Key, f, content+strings.Repeat(".", 64), rand.N(1200*time.Millisecond))
			default:
				o = w.viaGateway(ctx, a.Key, f, content)
			}
		} else {
			a.Way, a.Key = "pointer", fmt.Sprintf("p%d", rand.IntN(keys))
			switch r := rand.Float64(); {
			case r < 0.15 && len(past) > 0:
				// A replay, as after ErrUnknownOutcome: the same operation,
				// fence and content, at once or long after.
				p := past[len(past)-1]
				if rand.IntN(2) == 0 {
					p = past[rand.IntN(len(past))]
				}
				a.Kind, a.Op, a.Key, a.Fence, content = "replay", p.op, p.key, p.fence, p.content
			default:
				past = append(past, pointerOp{op: a.Op, key: a.Key, content: content, fence: f})
			}
			o = w.viaPointer(ctx, a.Key, a.Op, a.Fence, content)
		}
		a.Return = time.Now().UnixNano()
		a.Result, a.Code, a.Message = o.Result, o.Code, o.Message
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return nil
}

// aliasOf is a request path that a store would resolve to key: the gateway
// must refuse it.
func aliasOf(key string) string {
	switch rand.IntN(3) {
	case 0:
		return "./" + key
	case 1:
		return "x/../" + key
	}
	return key + "/."
}
