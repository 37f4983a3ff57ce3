# bash completion for lotus-bpf
_lotus_bpf()
{
    local cur prev words cword
    _init_completion || return
    local opts="-p --pid -d --duration -o --output --summary-json --html --speedscope --resources-csv --op-csv --resources-interval --net --pss-interval --cpus --memory --cpuset --device-read-bps --device-write-bps --record --replay --disk-reserve --hold-deadline --trainer-calls --pipeline --span --rules --metrics --node
        --all-calls --native-map --native --sample-freq --sample-stack --sample-unwind --counters --coarse --window -q --quiet -V --version -h --help"
    case $prev in
        -p|--pid)
            COMPREPLY=($(compgen -W "$(pgrep -f python 2>/dev/null)" -- "$cur"))
            return ;;
        -o|--output|--summary-json|--html|--speedscope|--resources-csv|--op-csv|--record|--replay|--rules)
            _filedir
            return ;;
        --counters)
            COMPREPLY=($(compgen -W "default task-clock page-faults context-switches cycles instructions cache-misses branch-misses" -- "$cur"))
            return ;;
        --pss-interval)
            COMPREPLY=($(compgen -W "auto 0" -- "$cur"))
            return ;;
        --trainer-calls)
            COMPREPLY=($(compgen -W "auto on off" -- "$cur"))
            return ;;
        --sample-unwind)
            COMPREPLY=($(compgen -W "cfi fp" -- "$cur"))
            return ;;
        -d|--duration|--stuck-after|--disk-reserve|--hold-deadline|--resources-interval|--cpus|--memory|--cpuset|--device-read-bps|--device-write-bps|--sample-freq|--sample-stack|--window|--pipeline|--span|--native)
            return ;;
    esac
    if [[ $cword -eq 1 && $cur != -* ]]; then
        COMPREPLY=($(compgen -W "record export report top diff sweep probes rules agent dump" -- "$cur"))
        return
    fi
    case ${words[1]} in
        agent)
            COMPREPLY=($(compgen -W "--metrics --match --record-dir --node --scan-interval --keep-finished --resources-interval --pipeline --span --rules --disk-reserve -h --help" -- "$cur"))
            return ;;
        rules)
            COMPREPLY=($(compgen -W "-o --output -h --help" -- "$cur"))
            return ;;
        dump)
            COMPREPLY=($(compgen -W "--no-native -h --help" -- "$cur"))
            return ;;
        probes)
            if [[ $cur != -* ]]; then
                _filedir
                return
            fi ;;
        export|report|diff)
            if [[ $cur != -* ]]; then
                _filedir lbt
                return
            fi ;;
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -F _lotus_bpf lotus-bpf
