# template, session 13 call 1 (fresh, one H200): the headline train phase and the 1536-frame long set, the same
# call as session 12's call 1 (475 s of script in session 12; the figures step fitted this time).
bash .gpu/s11c4.sh
