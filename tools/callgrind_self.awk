# Self cost (the first event, Ir) of one object in a callgrind profile:
#   awk -v obj=libzdapl -f tools/callgrind_self.awk callgrind.out
# Sums every cost line of the functions of the objects whose name contains
# @obj; the line after a calls= line is a call's inclusive cost, not a self
# cost, and is skipped.  Names are compressed: "(id) name" defines id,
# "(id)" refers to it, in ob= and cob= lines alike.
function object(spec,   id, name) {
	if (!match(spec, /^\([0-9]+\)/))
		return spec
	id = substr(spec, 2, RLENGTH - 2)
	name = substr(spec, RLENGTH + 1)
	sub(/^ /, "", name)
	if (name != "")
		names[id] = name
	return names[id]
}
/^ob=/ { cur = object(substr($0, 4)); next }
/^cob=/ { object(substr($0, 5)); next }
/^calls=/ { call_cost = 1; next }
/^[0-9+*-]/ {
	if (call_cost) {
		call_cost = 0
		next
	}
	if (index(cur, obj))
		sum += $2
}
END { printf "%d\n", sum }
