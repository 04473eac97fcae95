// The Go peer of `duality bench tasks`: N goroutines each loop on
// runtime.Gosched() on one OS thread (GOMAXPROCS=1), as the Rust runtimes'
// tasks loop on yield_now. Prints one JSON row in the Rust children's
// format: bytes per goroutine (RSS growth once every goroutine has run,
// divided by N) and Gosched calls per second over the window.
//
// Usage: tasks N SECONDS
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	f := strings.Fields(string(b))
	v, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return v * uint64(os.Getpagesize())
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tasks N SECONDS")
		os.Exit(2)
	}
	n, err := strconv.ParseUint(os.Args[1], 10, 64)
	if err != nil || n == 0 {
		fmt.Fprintln(os.Stderr, "N must be a positive integer")
		os.Exit(2)
	}
	secs, err := strconv.ParseFloat(os.Args[2], 64)
	if err != nil || secs <= 0 {
		fmt.Fprintln(os.Stderr, "SECONDS must be a positive number")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	var started, yields atomic.Uint64
	var stop atomic.Bool
	rss0 := rss()
	// Spawned first, run after: as the Rust runtimes' tasks, which are not
	// polled before the spawner yields. (Runnable from birth, they would
	// take the spawner's turns and make spawning quadratic in N.)
	start := make(chan struct{})
	for i := uint64(0); i < n; i++ {
		go func() {
			<-start
			started.Add(1)
			for !stop.Load() {
				yields.Add(1)
				runtime.Gosched()
			}
		}()
	}
	close(start)
	for started.Load() < n {
		runtime.Gosched()
	}
	rss1 := rss()
	y0 := yields.Load()
	t0 := time.Now()
	for time.Since(t0).Seconds() < secs {
		runtime.Gosched()
	}
	y := yields.Load() - y0
	el := time.Since(t0).Seconds()
	stop.Store(true)
	grown := float64(0)
	if rss1 > rss0 {
		grown = float64(rss1 - rss0)
	}
	out, err := json.Marshal(map[string]any{
		"runtime":        "go",
		"tasks":          n,
		"bytes_per_task": grown / float64(n),
		"yields_per_sec": float64(y) / el,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}
