package main

// The completion scripts only pass the words typed so far to "mscheduler
// __complete" and offer what it prints, or file names when it prints
// nothing: what to offer is decided in Go, where it is tested.

// bashCompletion reads the line up to the cursor rather than COMP_WORDS,
// which bash splits at "=" and ":"; it then drops from each candidate
// what bash keeps of the word, up to its last "=" or ":". It runs on the
// bash 3.2 of macOS too (no mapfile, no negative index).
const bashCompletion = `# bash completion for mscheduler: source <(mscheduler completion bash)
_mscheduler() {
    local line=${COMP_LINE:0:COMP_POINT} word keep= breaks candidate
    local -a words
    read -ra words <<<"$line"
    [[ $line == *[[:space:]] ]] && words+=("")
    word=${words[${#words[@]}-1]}
    breaks=${COMP_WORDBREAKS//[^=:]/}
    [[ -n $breaks && $word =~ ^(.*[$breaks]) ]] && keep=${BASH_REMATCH[1]}
    COMPREPLY=()
    while IFS= read -r candidate; do
        COMPREPLY+=("${candidate#"$keep"}")
    done < <("${words[0]}" __complete "${words[@]:1}" 2>/dev/null)
}
complete -o default -F _mscheduler mscheduler
`

// zshCompletion works sourced (after compinit) and as an autoloaded
// _mscheduler in $fpath.
const zshCompletion = `#compdef mscheduler
# zsh completion for mscheduler: source <(mscheduler completion zsh), after compinit
_mscheduler() {
  local -a candidates
  candidates=(${(f)"$(${words[1]} __complete "${(@)words[2,CURRENT-1]}" "$PREFIX" 2>/dev/null)"})
  if (( ${#candidates} )); then
    compadd -a candidates
  else
    _files
  fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _mscheduler "$@"
else
  compdef _mscheduler mscheduler
fi
`

// fishCompletion passes the word being typed quoted, so that an empty one
// is still a word.
const fishCompletion = `# fish completion for mscheduler: mscheduler completion fish | source
function __mscheduler_complete
    set -l words (commandline -opc)
    set -l current (commandline -ct)
    set -l candidates ($words[1] __complete $words[2..-1] "$current" 2>/dev/null)
    if set -q candidates[1]
        printf '%s\n' $candidates
    else
        __fish_complete_path "$current"
    end
end
complete -c mscheduler -f -a '(__mscheduler_complete)'
`
