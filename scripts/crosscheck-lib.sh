# What the cross-check scripts share; sourced by them, not run.

# Makes the scratch directory $work (/tmp/duality-NAME-XXXXXX) and the
# list $pids; on exit every process listed is stopped by its PID and the
# directory removed.
make_work() { # NAME
    work=$(mktemp -d "/tmp/duality-$1-XXXXXX")
    pids=()
    trap stop_and_clean EXIT
}

stop_and_clean() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}

# True once a memcached-protocol server answers `version` on PORT of
# 127.0.0.1 (tries for about TRIES tenths of a second).
memcache_up() { # PORT [TRIES]
    for _ in $(seq "${2:-50}"); do
        python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$1),1); s.sendall(b'version\r\n'); sys.exit(0 if s.recv(64).startswith(b'VERSION') else 1)" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
