# Two "hosts" on this machine for migration tests (sourced): network namespaces NAME_A and NAME_B
# joined by a veth pair, 10.77.0.1 and 10.77.0.2, loopback up in each. two_hosts_up PREFIX sets nsA,
# nsB (the namespaces; empty where none could be made), inA and inB (commands that run in each: only
# the network namespace changes, so that CRIU dumps and restores in this mount namespace), addrA and
# addrB (127.0.0.1 where there are no namespaces: both "hosts" are then this one). two_hosts_down
# removes them (call it from the trap). Returns 1 where namespaces exist but the pair cannot be set up.
two_hosts_up() {
	local p=$1
	nsA="" nsB="" inA=() inB=() addrA=127.0.0.1 addrB=127.0.0.1
	command -v ip >/dev/null && command -v nsenter >/dev/null || return 0
	ip netns add "${p}A$$" 2>/dev/null || return 0
	nsA=${p}A$$
	ip netns add "${p}B$$" || return 1
	nsB=${p}B$$
	ip link add "${p}a$$" netns "$nsA" type veth peer name "${p}b$$" netns "$nsB" &&
		ip -n "$nsA" addr add 10.77.0.1/24 dev "${p}a$$" && ip -n "$nsB" addr add 10.77.0.2/24 dev "${p}b$$" &&
		ip -n "$nsA" link set "${p}a$$" up && ip -n "$nsB" link set "${p}b$$" up &&
		ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up || return 1
	inA=(nsenter --net="/run/netns/$nsA") inB=(nsenter --net="/run/netns/$nsB")
	addrA=10.77.0.1 addrB=10.77.0.2
}
two_hosts_down() {
	[ -n "${nsA:-}" ] && ip netns del "$nsA" 2>/dev/null
	[ -n "${nsB:-}" ] && ip netns del "$nsB" 2>/dev/null
	nsA="" nsB=""
}
