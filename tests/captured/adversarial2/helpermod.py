SCALE = 1.0
TABLE = {'w': 0.5}
def helper_scale(t):
    return t * SCALE
def get_w():
    return TABLE['w']

