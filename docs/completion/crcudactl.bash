# bash completion for crcudactl (crcuda)
_crcudactl()
{
	local cur prev words cword cmd i opts
	_init_completion 2>/dev/null || {
		cur=${COMP_WORDS[COMP_CWORD]}
		prev=${COMP_WORDS[COMP_CWORD - 1]}
		words=("${COMP_WORDS[@]}")
		cword=$COMP_CWORD
	}
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--) [ "$cmd" = run ] && { mapfile -t COMPREPLY < <(compgen -c -- "$cur"); return; } ;;
		-*) ;;
		*) [ -z "$cmd" ] && cmd=${words[i]} ;;
		esac
	done
	case $prev in
	--store | -s | --token-file | --daemon-log | --socket | --daemon | --output | -o | --input | -i)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return
		;;
	--backend)
		mapfile -t COMPREPLY < <(compgen -W "cuda sim" -- "$cur")
		return
		;;
	--remote | --timeout | --gpu | --idle-exit | --va-base | --va-session) return ;;
	esac
	case $cmd in
	"") opts="run checkpoint restore export import migrate receive ls status suspend resume rm inspect store -h --help -V --version -v --verbose -q --quiet --json" ;;
	run) opts="--backend --socket --daemon-log --idle-exit --va-base --va-session --remote --token-file -h --help --" ;;
	checkpoint) opts="-R --leave-running --leave-stopped --no-background --tcp-established -s --store --daemon --remote --token-file --timeout --progress --json -h --help" ;;
	restore) opts="-s --store --remote --token-file --daemon --backend --gpu --timeout --progress --json -h --help" ;;
	export) opts="-s --store -o --output --json -h --help" ;;
	import) opts="-s --store -i --input --json -h --help" ;;
	migrate) opts="-t --to --token-file -n --rounds --max-downtime -s --store --daemon --timeout --send-files --streams --insecure --tls-cert --tls-key --tls-ca -h --help" ;;
	receive) opts="-l --listen --token-file -s --store --daemon --backend --timeout --once --insecure --tls-cert --tls-key --tls-ca -h --help" ;;
	ls) opts="-s --store --daemon --json -h --help" ;;
	inspect) opts="-s --store --chunks --json -h --help" ;;
	status) opts="--daemon --json -h --help" ;;
	suspend) opts="-s --store --daemon --timeout --progress --json -h --help" ;;
	resume) opts="--daemon --gpu --keep --timeout --progress --json -h --help" ;;
	store) opts="ls inspect verify gc -s --store --json -h --help" ;;
	esac
	mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
}
complete -F _crcudactl crcudactl
