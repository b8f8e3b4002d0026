# bash completion for crcudad (crcuda)
_crcudad()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	case $prev in
	--backend)
		mapfile -t COMPREPLY < <(compgen -W "cuda sim" -- "$cur")
		return
		;;
	--backend-lib | --socket | --token-file)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return
		;;
	--listen | --va-base | --va-session | --pool | --ring-size | --idle-exit) return ;;
	esac
	mapfile -t COMPREPLY < <(compgen -W "--backend --backend-lib --socket --listen --token-file --va-base
		--va-session --pool --ring-size --idle-exit --foreground -v -q --version --help" -- "$cur")
}
complete -F _crcudad crcudad
