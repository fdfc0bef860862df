# Shared by the interop scripts (sourced, POSIX sh): the unmodified Debian
# dapl2-utils clients run through libdat2 with this build's dat.conf
# (DAT_OVERRIDE), servers in the background with a timeout, every server
# killed by its PID when the script ends, output kept in a temporary
# directory and printed at the end.
#
#   interop_init <dat.conf or -> <program>...   exit 77 if a program is missing
#   server_start <name> <pattern> <secs> <cmd>...
#                  runs cmd in the background (timeout secs), output in
#                  $dir/<name>; returns once <pattern> (grep -E) is printed
#                  (exit 1 if the server dies or takes over 10 s)
#   server_wait <name> <secs>   waits for that server to end (else dumps its
#                               stacks and kills it); its status
#   client <name> <secs> <cmd>...   runs cmd (timeout secs; 2 s before, its
#                               stacks are dumped into its output); status
#   show <name>...              prints outputs, with headers
#   has <name> <pattern>        grep -E -q in an output
#   verdict <what> <ok>         prints PASS/FAIL, exits 0/1
#   wait_listen <name> <port>   waits (10 s at most) until that server
#                               listens on TCP <port>
#   free_port                   a TCP port nobody listens on right now
#   free_port_block <n>         a port below the ephemeral range with the n
#                               after it free too
#
# Two hosts (tests/netns/netns.sh): INTEROP_SERVER_WRAP and
# INTEROP_CLIENT_WRAP are command prefixes servers and clients run under
# (e.g. "ip netns exec <ns> env DAT_OVERRIDE=<its dat.conf>"), and
# INTEROP_HOST ($host) the address clients reach the server at; by
# default both run here and the server is 127.0.0.1.
set -u
srv_wrap=${INTEROP_SERVER_WRAP:-}
cli_wrap=${INTEROP_CLIENT_WRAP:-}
host=${INTEROP_HOST:-127.0.0.1}

interop_init() {
	conf=$1
	shift
	for prog in "$@"; do
		command -v "$prog" >/dev/null ||
			{ echo "$prog not installed (dapl2-utils)"; exit 77; }
	done
	# "-": the system's registry (/etc/dat.conf), as an installed
	# zdapl's users run (tests/pkg).
	if [ "$conf" = - ]; then
		unset DAT_OVERRIDE
	else
		export DAT_OVERRIDE=$conf
	fi
	# Line-buffered output, so a run killed by its timeout still shows
	# how far it got.
	linebuf=""
	command -v stdbuf >/dev/null && linebuf="stdbuf -oL -eL"
	dir=$(mktemp -d)
	servers=""
	trap interop_cleanup EXIT
	trap 'exit 1' INT TERM
}

interop_cleanup() {
	for pid in $servers; do
		kill "$pid" 2>/dev/null
	done
	rm -rf "$dir"
}

# Runs "$@" (after <name> <delay> <why>) up to 100 times, <delay> s apart,
# until it succeeds; if server <name> dies or that runs out, prints <why>
# and the server's output and exits 1.
await_server() {
	_aname=$1 _adelay=$2 _awhy=$3 _apid=
	shift 3
	eval "_apid=\$pid_$_aname"
	_i=0
	while ! "$@"; do
		_i=$((_i + 1))
		if [ $_i -gt 100 ] || ! kill -0 "$_apid" 2>/dev/null; then
			echo "$_awhy:"
			cat "$dir/$_aname"
			exit 1
		fi
		sleep "$_adelay"
	done
}

server_start() {
	_name=$1 _pat=$2 _secs=$3
	shift 3
	timeout "$_secs" $srv_wrap $linebuf "$@" >"$dir/$_name" 2>&1 &
	_pid=$!
	servers="$servers $_pid"
	eval "pid_$_name=$_pid"
	await_server "$_name" 0.1 "server '$*' did not come up" grep -Eqs "$_pat" "$dir/$_name"
}

server_wait() {
	eval "_pid=\$pid_$1"
	_i=0
	while kill -0 "$_pid" 2>/dev/null && [ $_i -lt $(($2 * 10)) ]; do
		_i=$((_i + 1))
		sleep 0.1
	done
	kill -0 "$_pid" 2>/dev/null && stacks "$1" "$_pid"
	kill "$_pid" 2>/dev/null
	wait "$_pid"
	_st=$?
	forget "$_pid"
	return $_st
}

forget() { # pid: no longer ours to kill
	_rest=""
	for pid in $servers; do
		[ "$pid" = "$1" ] || _rest="$_rest $pid"
	done
	servers=$_rest
}

# Stacks of a process that overran its time (gdb, if installed), into the
# output of <name>: a hang is diagnosed from the log alone.
stacks() { # name pid
	command -v gdb >/dev/null || return 0
	for _p in $(pgrep -P "$2" 2>/dev/null); do  # timeout's child
		echo "---- stacks of $_p ($(cat /proc/$_p/comm 2>/dev/null)), still running"
		timeout 30 gdb -batch -p "$_p" -ex "thread apply all bt" 2>&1 |
			grep -E '^(Thread|#)'
	done >>"$dir/$1"
}

client() {
	_name=$1 _secs=$2
	shift 2
	timeout -k 5 "$_secs" $cli_wrap $linebuf "$@" >"$dir/$_name" 2>&1 &
	_cpid=$!
	servers="$servers $_cpid"  # killed too if we are
	_i=0
	while kill -0 "$_cpid" 2>/dev/null && [ $_i -lt $(($_secs * 10 - 20)) ]; do
		_i=$((_i + 1))
		sleep 0.1
	done
	kill -0 "$_cpid" 2>/dev/null && stacks "$_name" "$_cpid"
	wait "$_cpid"
	_st=$?
	forget "$_cpid"
	return $_st
}

# The stock dtest-family shape: run the client against the server started
# as "server", then let the server finish; sets crc and src, shows both logs.
client_against_server() { # secs cmd...
	client client "$@"
	crc=$?
	server_wait server 30
	src=$?
	show server client
	echo "client exit $crc, server exit $src"
}

show() {
	for _n in "$@"; do
		echo "---- $_n"
		cat "$dir/$_n"
	done
}

has() {
	grep -Eq "$2" "$dir/$1"
}

verdict() {
	echo "$1: $([ "$2" = 1 ] && echo PASS || echo FAIL)"
	[ "$2" = 1 ]
	exit
}

listening() {
	[ -n "$($srv_wrap ss -Hltn "sport = :$1" 2>/dev/null)" ]
}

wait_listen() {
	await_server "$1" 0.05 "server $1 never listened on port $2" listening "$2"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])' \
		2>/dev/null || echo $((40000 + $$ % 20000))
}

# A base port below the kernel's ephemeral range (where the tcp device's
# data listeners and every outgoing connection take theirs) with the <n>
# ports after it free right now: dapltest's test EPs use base+1, base+2...
free_port_block() { # n
	_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	_try=0
	while [ $_try -lt 50 ]; do
		_base=$((10000 + ($$ * 7919 + _try * 104729) % (_lo - 10000 - $1)))
		if [ -z "$($srv_wrap ss -Htan "( sport >= :$_base and sport <= :$((_base + $1)) )" \
			2>/dev/null)" ]; then
			echo $_base
			return
		fi
		_try=$((_try + 1))
	done
	free_port
}
