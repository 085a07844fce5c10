// Command s3load is the Go load generator of bench/s3_vs_rgw.py (--client go): one phase of
// PUTs or GETs at a fixed concurrency, or one full ListObjectsV2 pagination, against any S3
// endpoint with path-style addressing and SigV4 (signed payload, like boto3 over plain HTTP).
// Only the standard library is used.
//
// A phase connects every worker first (HEAD bucket), prints "ready" and waits for a line on
// standard input before the clock starts, so the caller can sample CPU and load at the start.
// The result is one JSON object on standard output.
//
//	s3load phase -endpoint http://H:P -access-key A -secret-key S -op put -bucket B \
//	    -size 4096 -conc 16 -duration 10 -prefix 4KiB/c16 -pattern FILE -keys-out FILE
//	s3load phase ... -op get -keys FILE             # random keys of FILE
//	s3load phase ... -op put -keys FILE             # each key of FILE once (no duration)
//	s3load list -endpoint ... -bucket B -keys FILE  # paginate, check against FILE
package main

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

const keyPrefixBytes = 64

type signer struct {
	endpoint, access, secret, region, host string
}

// uriEncode encodes like SigV4 wants: everything but unreserved characters (and '/' in paths).
func uriEncode(s string, path bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			c == '-' || c == '_' || c == '.' || c == '~' || (path && c == '/') {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// request builds a signed request; query is a map of parameters (nil for none).
func (s *signer) request(method, bucket, key string, query map[string]string, body []byte) *http.Request {
	path := "/" + bucket
	if key != "" {
		path += "/" + key
	}
	epath := uriEncode(path, true)
	names := make([]string, 0, len(query))
	for k := range query {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, uriEncode(k, false)+"="+uriEncode(query[k], false))
	}
	qs := strings.Join(parts, "&")
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	canonical := method + "\n" + epath + "\n" + qs + "\n" +
		"host:" + s.host + "\nx-amz-content-sha256:" + payload + "\nx-amz-date:" + amzDate + "\n\n" +
		"host;x-amz-content-sha256;x-amz-date\n" + payload
	scope := day + "/" + s.region + "/s3/aws4_request"
	ch := sha256.Sum256([]byte(canonical))
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	k := hmacSHA256([]byte("AWS4"+s.secret), day)
	k = hmacSHA256(k, s.region)
	k = hmacSHA256(k, "s3")
	k = hmacSHA256(k, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(k, sts))
	u := s.endpoint + epath
	if qs != "" {
		u += "?" + qs
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		panic(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("x-amz-content-sha256", payload)
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+s.access+"/"+scope+
		", SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="+sig)
	return req
}

// newClient is one worker's client: one connection, kept alive.
func newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableCompression:  true,
		},
		Timeout: 300 * time.Second,
	}
}

func bodyFor(key string, base []byte) []byte {
	b := make([]byte, len(base))
	copy(b, base)
	head := []byte(key)
	for len(head) < keyPrefixBytes {
		head = append(head, '.')
	}
	copy(b, head[:min(keyPrefixBytes, len(b))])
	return b
}

func etagOf(r *http.Response) string { return strings.Trim(r.Header.Get("ETag"), "\"") }

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

type workerOut struct {
	lat                   []float64
	startAt               []float64 // seconds from the phase's start, one per lat
	bytes                 int64
	errors, verified, bad int
	msgs, keys            []string
}

func (w *workerOut) fail(msg string) {
	w.errors++
	if len(w.msgs) < 5 {
		w.msgs = append(w.msgs, msg)
	}
}

func pct(sorted []float64, p float64) any {
	if len(sorted) == 0 {
		return nil
	}
	i := int(p/100.0*float64(len(sorted))+0.5+0.5) - 1 // round(p/100*n + 0.5) - 1, as the Python
	i = max(0, min(len(sorted)-1, i))
	return sorted[i] * 1e3
}

func readLines(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "s3load:", err)
	os.Exit(2)
}

func phase(s *signer, args []string) {
	fs := flag.NewFlagSet("phase", flag.ExitOnError)
	op := fs.String("op", "put", "put or get")
	bucket := fs.String("bucket", "bench", "bucket")
	size := fs.Int("size", 4096, "object size")
	conc := fs.Int("conc", 1, "concurrent requests")
	duration := fs.Float64("duration", 0, "seconds (0: each key of -keys once, PUT only)")
	prefix := fs.String("prefix", "p", "key prefix of fresh PUT keys")
	keysFile := fs.String("keys", "", "GET: keys to pick from; PUT: keys to write once")
	patternFile := fs.String("pattern", "", "body bytes (key written over the first 64)")
	keysOut := fs.String("keys-out", "", "PUT: write the keys stored here")
	latOut := fs.String("lat-out", "", "write 'start_s latency_ms' of every request here")
	verifyEvery := fs.Int("verify-every", 8, "check one request in N")
	seed := fs.Int64("seed", 0, "GET key choice")
	addFlags(fs, s)
	parse(fs, s, args)
	base := make([]byte, *size)
	if *patternFile != "" {
		p, err := os.ReadFile(*patternFile)
		if err != nil || len(p) != *size {
			fatal(fmt.Errorf("pattern %s: %v (%d bytes, want %d)", *patternFile, err, len(p), *size))
		}
		base = p
	}
	var keys []string
	if *keysFile != "" {
		keys = readLines(*keysFile)
	}
	outs := make([]*workerOut, *conc)
	clients := make([]*http.Client, *conc)
	for i := range clients {
		outs[i] = &workerOut{}
		clients[i] = newClient()
		resp, err := clients[i].Do(s.request("HEAD", *bucket, "", nil, nil))
		if err != nil {
			fatal(fmt.Errorf("connect: %v", err))
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	start := time.Now()
	var deadline time.Time
	if *duration > 0 {
		deadline = start.Add(time.Duration(*duration * float64(time.Second)))
	}
	var wg sync.WaitGroup
	for t := 0; t < *conc; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			cli, out := clients[t], outs[t]
			rnd := rand.New(rand.NewSource(*seed*1000 + int64(t)))
			buf := make([]byte, *size)
			for n := 0; ; n++ {
				if !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				verify := n%*verifyEvery == 0
				if *op == "put" {
					var key string
					if *duration == 0 {
						i := t + n**conc
						if i >= len(keys) {
							return
						}
						key = keys[i]
					} else {
						key = fmt.Sprintf("%s/t%03d-%07d", *prefix, t, n)
					}
					body := bodyFor(key, base)
					t0 := time.Now()
					resp, err := cli.Do(s.request("PUT", *bucket, key, nil, body))
					if err != nil {
						out.fail(fmt.Sprintf("PUT %s: %v", key, err))
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					dt := time.Since(t0).Seconds()
					if resp.StatusCode != 200 {
						out.fail(fmt.Sprintf("PUT %s: HTTP %d", key, resp.StatusCode))
						continue
					}
					out.lat = append(out.lat, dt)
					out.startAt = append(out.startAt, t0.Sub(start).Seconds())
					out.bytes += int64(len(body))
					if *duration > 0 {
						out.keys = append(out.keys, key)
					}
					if verify {
						out.verified++
						if etagOf(resp) != md5hex(body) {
							out.bad++
							out.fail(fmt.Sprintf("PUT %s: ETag %s != MD5", key, etagOf(resp)))
						}
					}
				} else {
					key := keys[rnd.Intn(len(keys))]
					t0 := time.Now()
					resp, err := cli.Do(s.request("GET", *bucket, key, nil, nil))
					if err != nil {
						out.fail(fmt.Sprintf("GET %s: %v", key, err))
						continue
					}
					m, rerr := io.ReadFull(resp.Body, buf)
					extra, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					dt := time.Since(t0).Seconds()
					if resp.StatusCode != 200 || (rerr != nil && rerr != io.ErrUnexpectedEOF) {
						out.fail(fmt.Sprintf("GET %s: HTTP %d %v", key, resp.StatusCode, rerr))
						continue
					}
					out.lat = append(out.lat, dt)
					out.startAt = append(out.startAt, t0.Sub(start).Seconds())
					out.bytes += int64(m) + extra
					if verify {
						out.verified++
						if extra != 0 || m != *size || !bytes.Equal(buf, bodyFor(key, base)) ||
							etagOf(resp) != md5hex(buf[:m]) {
							out.bad++
							out.fail(fmt.Sprintf("GET %s: content or ETag mismatch", key))
						}
					}
				}
			}
		}(t)
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	var lat []float64
	var nbytes int64
	res := map[string]any{}
	errors, verified, bad := 0, 0, 0
	var msgs, stored []string
	for _, o := range outs {
		lat = append(lat, o.lat...)
		nbytes += o.bytes
		errors += o.errors
		verified += o.verified
		bad += o.bad
		msgs = append(msgs, o.msgs...)
		stored = append(stored, o.keys...)
	}
	if *latOut != "" {
		var b strings.Builder
		for _, o := range outs {
			for i := range o.lat {
				fmt.Fprintf(&b, "%.4f %.2f\n", o.startAt[i], o.lat[i]*1e3)
			}
		}
		if err := os.WriteFile(*latOut, []byte(b.String()), 0o644); err != nil {
			fatal(err)
		}
	}
	sort.Float64s(lat)
	if len(msgs) > 5 {
		msgs = msgs[:5]
	}
	if *keysOut != "" {
		if err := os.WriteFile(*keysOut, []byte(strings.Join(stored, "\n")+"\n"), 0o644); err != nil {
			fatal(err)
		}
	}
	res["wall_s"] = wall
	res["ops"] = len(lat)
	res["bytes"] = nbytes
	res["errors"], res["verified"], res["bad"], res["err_msgs"] = errors, verified, bad, msgs
	res["p50_ms"], res["p99_ms"] = pct(lat, 50), pct(lat, 99)
	if len(lat) > 0 {
		total := 0.0
		for _, x := range lat {
			total += x
		}
		res["max_ms"] = lat[len(lat)-1] * 1e3
		res["mean_ms"] = total / float64(len(lat)) * 1e3
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

type listResult struct {
	Contents []struct {
		Key string `xml:"Key"`
	} `xml:"Contents"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
}

func list(s *signer, args []string) {
	fs := flag.NewFlagSet("list", flag.ExitOnError)
	bucket := fs.String("bucket", "bench-list", "bucket")
	keysFile := fs.String("keys", "", "the keys expected, in order")
	addFlags(fs, s)
	parse(fs, s, args)
	expect := readLines(*keysFile)
	cli := newClient()
	resp, err := cli.Do(s.request("HEAD", *bucket, "", nil, nil))
	if err != nil {
		fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	var got []string
	var pages, httpT []float64
	token := ""
	t0 := time.Now()
	for {
		q := map[string]string{"list-type": "2", "max-keys": "1000"}
		if token != "" {
			q["continuation-token"] = token
		}
		p0 := time.Now()
		resp, err := cli.Do(s.request("GET", *bucket, "", q, nil))
		if err != nil {
			fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		httpT = append(httpT, time.Since(p0).Seconds())
		if err != nil || resp.StatusCode != 200 {
			fatal(fmt.Errorf("list: HTTP %d %v %s", resp.StatusCode, err, body))
		}
		var r listResult
		if err := xml.Unmarshal(body, &r); err != nil {
			fatal(err)
		}
		pages = append(pages, time.Since(p0).Seconds())
		for _, c := range r.Contents {
			got = append(got, c.Key)
		}
		if !r.IsTruncated {
			break
		}
		token = r.NextContinuationToken
	}
	total := time.Since(t0).Seconds()
	ok := len(got) == len(expect)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i] == expect[i]
	}
	httpTotal := 0.0
	for _, x := range httpT {
		httpTotal += x
	}
	sort.Float64s(pages)
	sort.Float64s(httpT)
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"keys": len(got), "pages": len(pages), "seconds": total,
		"keys_s":      float64(len(got)) / total,
		"page_p50_ms": pct(pages, 50), "page_p99_ms": pct(pages, 99),
		"page_max_ms": pages[len(pages)-1] * 1e3,
		"http_p50_ms": pct(httpT, 50), "http_p99_ms": pct(httpT, 99),
		"http_total_s": httpTotal, "correct": ok,
	})
}

// parse reads the flags and derives the signed host header (host:port, as Go sends it).
func parse(fs *flag.FlagSet, s *signer, args []string) {
	fs.Parse(args)
	u, err := url.Parse(s.endpoint)
	if err != nil || u.Host == "" {
		fatal(fmt.Errorf("bad endpoint %q", s.endpoint))
	}
	s.endpoint = strings.TrimRight(s.endpoint, "/")
	s.host = u.Host
}

func addFlags(fs *flag.FlagSet, s *signer) {
	fs.StringVar(&s.endpoint, "endpoint", "http://127.0.0.1:7480", "http://HOST:PORT")
	fs.StringVar(&s.access, "access-key", "", "access key")
	fs.StringVar(&s.secret, "secret-key", "", "secret key")
	fs.StringVar(&s.region, "region", "us-east-1", "region")
}

func main() {
	if len(os.Args) < 2 {
		fatal(fmt.Errorf("usage: s3load phase|list FLAGS"))
	}
	s := &signer{}
	switch os.Args[1] {
	case "phase":
		phase(s, os.Args[2:])
	case "list":
		list(s, os.Args[2:])
	default:
		fatal(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
