# template, session 14 call 1 (fresh, one H200): the headline train phase and the 1536-frame long set, the same
# call as sessions 12 and 13 (535 s of call in session 13).
bash .gpu/s11c4.sh
