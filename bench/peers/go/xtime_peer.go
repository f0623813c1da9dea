// The Go peer of bench/peers/table.py: golang.org/x/time/rate (Debian's
// golang-golang-x-time-dev), measured the way bench/memory_store_benchmark.cc measures
// sluice. One limiter per key, limits high enough that every call is admitted (a refusal
// ends the run with an error: the figures would mean nothing).
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o xtime_peer xtime_peer.go
//	xtime_peer [-seconds 1] [-keys 1000000] MEASURE...
//
// Measures, each printed as "name value unit":
//
//	hot_key_clock        one limiter, Allow() (time.Now() inside, per call)
//	hot_key_passed_in    one limiter, AllowN(now, 1), now read once per 1024 calls
//	hot_key_2threads     two goroutines on one limiter, Allow(); decisions/s in all
//	keys_clock           -keys limiters in a map[string]*rate.Limiter, a uniform random key
//	                     per call (indices drawn before timing), Allow()
//	keys_passed_in       the same with AllowN(now, 1), now read once per 1024 calls
//	bytes_per_key        Go heap in use after runtime.GC(), before and after making -keys
//	                     keys of 16-17 characters and their limiters (one Allow() each),
//	                     divided by the keys; also the resident set's growth (rss_per_key)
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	perSecond = rate.Limit(1e9) // finite: rate.Inf would skip the arithmetic
	burst     = 1 << 30
	indices   = 1 << 22 // pre-drawn key indices, cycled
)

func newLimiter() *rate.Limiter { return rate.NewLimiter(perSecond, burst) }

// run calls step until seconds have passed (the clock read once per 1024 calls) and returns
// decisions per second; step answers whether its call was admitted.
func run(name string, seconds float64, step func(i int) bool) float64 {
	refused := 0
	calls := 0
	start := time.Now()
	deadline := start.Add(time.Duration(seconds * float64(time.Second)))
	for {
		for j := 0; j < 1024; j++ {
			if !step(calls) {
				refused++
			}
			calls++
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if refused > 0 {
		fmt.Fprintf(os.Stderr, "xtime_peer: %s: %d of %d calls refused\n", name, refused, calls)
		os.Exit(1)
	}
	return float64(calls) / time.Since(start).Seconds()
}

func xorshiftIndices(keys int) []int32 {
	out := make([]int32, indices)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = int32(x % uint64(keys))
	}
	return out
}

func makeKeys(keys int) (map[string]*rate.Limiter, []string) {
	m := make(map[string]*rate.Limiter)
	names := make([]string, keys)
	for n := 0; n < keys; n++ {
		names[n] = "user:" + strconv.Itoa(n)
		m[names[n]] = newLimiter()
	}
	return m, names
}

func measure(name string, seconds float64, keys int) (float64, string) {
	switch name {
	case "hot_key_clock":
		l := newLimiter()
		return run(name, seconds, func(int) bool { return l.Allow() }), "decisions/s"
	case "hot_key_passed_in":
		l := newLimiter()
		now := time.Now()
		return run(name, seconds, func(i int) bool {
			if i&1023 == 0 {
				now = time.Now()
			}
			return l.AllowN(now, 1)
		}), "decisions/s"
	case "hot_key_2threads":
		l := newLimiter()
		var wg sync.WaitGroup
		rates := make([]float64, 2)
		for t := range rates {
			wg.Add(1)
			go func(t int) {
				defer wg.Done()
				rates[t] = run(name, seconds, func(int) bool { return l.Allow() })
			}(t)
		}
		wg.Wait()
		return rates[0] + rates[1], "decisions/s"
	case "keys_clock", "keys_passed_in":
		m, names := makeKeys(keys)
		idx := xorshiftIndices(keys)
		now := time.Now()
		clock := name == "keys_clock"
		return run(name, seconds, func(i int) bool {
			l := m[names[idx[i&(indices-1)]]]
			if clock {
				return l.Allow()
			}
			if i&1023 == 0 {
				now = time.Now()
			}
			return l.AllowN(now, 1)
		}), "decisions/s"
	}
	fmt.Fprintf(os.Stderr, "xtime_peer: unknown measure %q\n", name)
	os.Exit(2)
	return 0, ""
}

func residentBytes() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	pages, _ := strconv.ParseFloat(fields[1], 64)
	return pages * float64(os.Getpagesize())
}

func heapInUse() float64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return float64(s.HeapAlloc)
}

// bytesPerKey keys like sluice_memory_bench's: "client-" and n*7919+13 padded to 9 digits.
func bytesPerKey(keys int) {
	heap, rss := heapInUse(), residentBytes()
	m := make(map[string]*rate.Limiter)
	for n := 0; n < keys; n++ {
		k := fmt.Sprintf("client-%09d", n*7919+13)
		m[k] = newLimiter()
		m[k].Allow()
	}
	heapAfter, rssAfter := heapInUse(), residentBytes()
	fmt.Printf("bytes_per_key %.1f B\n", (heapAfter-heap)/float64(keys))
	fmt.Printf("rss_per_key %.1f B\n", (rssAfter-rss)/float64(keys))
	runtime.KeepAlive(m)
}

func main() {
	seconds := flag.Float64("seconds", 1, "seconds per measure")
	keys := flag.Int("keys", 1000000, "keys of the many-keys and bytes-per-key measures")
	flag.Parse()
	if flag.NArg() == 0 || *seconds <= 0 || *keys <= 0 {
		fmt.Fprintln(os.Stderr, "usage: xtime_peer [-seconds S] [-keys N] MEASURE...")
		os.Exit(2)
	}
	for _, name := range flag.Args() {
		if name == "bytes_per_key" {
			bytesPerKey(*keys)
			continue
		}
		value, unit := measure(name, *seconds, *keys)
		fmt.Printf("%s %.0f %s\n", name, value, unit)
	}
}
