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
// lease, with its last fence or the current one anyway. Every attempt is
// one JSON line of $HISTORY with its call and return times and outcome.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	gw := w.gateways[rand.IntN(len(w.gateways))]
	_, err := gw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(w.bucket), Key: aws.String(key), Body: strings.NewReader(content)},
		func(o *s3.Options) {
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
	case err == nil, errors.Is(err, fences3.ErrAlreadyApplied):
		return outcome{Result: "accepted"}
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
	Key     string `json:"key"`
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
		a := Attempt{Pod: pod, UID: uid, Fence: f, Holder: holder, Op: fmt.Sprintf("%s-%d", pod, n)}
		content := a.Op
		a.Call = time.Now().UnixNano()
		var o outcome
		if n%2 == 0 && len(w.gateways) > 0 || w.store == nil {
			a.Way, a.Key = "gateway", fmt.Sprintf("k%d", rand.IntN(keys))
			o = w.viaGateway(ctx, a.Key, f, content)
		} else {
			a.Way, a.Key = "pointer", fmt.Sprintf("p%d", rand.IntN(keys))
			o = w.viaPointer(ctx, a.Key, a.Op, f, content)
		}
		a.Return = time.Now().UnixNano()
		a.Result, a.Code, a.Message = o.Result, o.Code, o.Message
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return nil
}
