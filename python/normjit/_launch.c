/* normjit._launch: normjit_launch, normjit_launch_ex and normjit_launch_backward called from Python
 * without ctypes' per-call argument conversion (about 2 us of an eager normjit.torch call on the
 * H100 machine's host).
 *
 * Built against the stable ABI (one wheel serves every CPython from the floor in
 * pyproject.toml's wheel.py-api up). It does not link libnormjit.so: the library's SONAME is
 * libnormjit.so.0 and the wheel holds it as libnormjit.so, and the library to call is the one
 * normjit._capi loaded (NORMJIT_LIBRARY may name another). _capi hands over the addresses of
 * that library's functions with bind(), bind_ex() and bind_backward(); calls go through pointers of
 * the header's own prototypes, so the compiler checks them against normjit.h. Errors stay Python's:
 * launch and launch_ex return the status and normjit._capi builds the exception from it. */
#include <normjit/normjit.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef __typeof__(normjit_launch) launch_fn;
typedef __typeof__(normjit_launch_ex) launch_ex_fn;
typedef __typeof__(normjit_launch_args_init_sized) args_init_fn;
typedef __typeof__(normjit_launch_backward) launch_backward_fn;
typedef __typeof__(normjit_backward_args_init_sized) backward_args_init_fn;

static launch_fn* bound;       /* the normjit_launch of the library normjit._capi loaded */
static launch_ex_fn* bound_ex; /* its normjit_launch_ex */
/* What its normjit_launch_args_init_sized fills in (size and the defaults of this header's
 * struct), copied by each launch_ex: one call of the library's own initialiser, at bind_ex. */
static normjit_launch_args defaults;
static launch_backward_fn* bound_backward; /* its normjit_launch_backward */
/* What its normjit_backward_args_init_sized fills in, copied by each launch_backward. */
static normjit_backward_args backward_defaults;

/* A pointer argument: an int (a data pointer, a handle), or None for NULL where allowed. */
static int as_pointer(PyObject* arg, const char* name, int none_ok, void** out) {
  if (none_ok && arg == Py_None) {
    *out = NULL;
    return 1;
  }
  if (!PyLong_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "normjit._launch.launch: %s must be an int%s, not %R", name,
                 none_ok ? " or None" : "", (PyObject*)Py_TYPE(arg));
    return 0;
  }
  *out = PyLong_AsVoidPtr(arg);
  return !(*out == NULL && PyErr_Occurred());
}

static PyObject* bind(PyObject* self, PyObject* address) {
  (void)self;
  void* p;
  if (!as_pointer(address, "address", /*none_ok=*/0, &p)) return NULL;
  if (!p) {
    PyErr_SetString(PyExc_ValueError, "normjit._launch.bind: address 0");
    return NULL;
  }
  bound = (launch_fn*)p;
  Py_RETURN_NONE;
}

/* bind_ex(launch_ex_address, args_init_sized_address) */
static PyObject* bind_ex(PyObject* self, PyObject* argt) {
  (void)self;
  if (PyTuple_Size(argt) != 2) {
    PyErr_SetString(PyExc_TypeError,
                    "normjit._launch.bind_ex takes 2 arguments (the addresses of "
                    "normjit_launch_ex and normjit_launch_args_init_sized)");
    return NULL;
  }
  void *ex, *init;
  if (!as_pointer(PyTuple_GetItem(argt, 0), "launch_ex_address", /*none_ok=*/0, &ex) ||
      !as_pointer(PyTuple_GetItem(argt, 1), "args_init_sized_address", /*none_ok=*/0, &init)) {
    return NULL;
  }
  if (!ex || !init) {
    PyErr_SetString(PyExc_ValueError, "normjit._launch.bind_ex: address 0");
    return NULL;
  }
  ((args_init_fn*)init)(&defaults, sizeof defaults);
  bound_ex = (launch_ex_fn*)ex;
  Py_RETURN_NONE;
}

/* bind_backward(launch_backward_address, backward_args_init_sized_address) */
static PyObject* bind_backward(PyObject* self, PyObject* argt) {
  (void)self;
  if (PyTuple_Size(argt) != 2) {
    PyErr_SetString(PyExc_TypeError,
                    "normjit._launch.bind_backward takes 2 arguments (the addresses of "
                    "normjit_launch_backward and normjit_backward_args_init_sized)");
    return NULL;
  }
  void *launch, *init;
  if (!as_pointer(PyTuple_GetItem(argt, 0), "launch_backward_address", /*none_ok=*/0, &launch) ||
      !as_pointer(PyTuple_GetItem(argt, 1), "backward_args_init_sized_address", /*none_ok=*/0, &init)) {
    return NULL;
  }
  if (!launch || !init) {
    PyErr_SetString(PyExc_ValueError, "normjit._launch.bind_backward: address 0");
    return NULL;
  }
  ((backward_args_init_fn*)init)(&backward_defaults, sizeof backward_defaults);
  bound_backward = (launch_backward_fn*)launch;
  Py_RETURN_NONE;
}

/* METH_VARARGS: METH_FASTCALL is in the limited API from 3.10 only, and measured against it
 * (a no-op target, Python 3.11) the argument tuple costs about 25 ns of the call's 350. */
static PyObject* launch(PyObject* self, PyObject* argt) {
  const Py_ssize_t nargs = PyTuple_Size(argt);
#define ARG(i) PyTuple_GetItem(argt, i)
  (void)self;
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError,
                 "normjit._launch.launch takes 8 arguments (kernel, x, y, weight, bias, batch, "
                 "eps, stream), not %zd",
                 nargs);
    return NULL;
  }
  void *kernel, *x, *y, *weight, *bias, *stream;
  if (!as_pointer(ARG(0), "kernel", /*none_ok=*/0, &kernel) ||
      !as_pointer(ARG(1), "x", /*none_ok=*/0, &x) || !as_pointer(ARG(2), "y", /*none_ok=*/0, &y) ||
      !as_pointer(ARG(3), "weight", /*none_ok=*/1, &weight) ||
      !as_pointer(ARG(4), "bias", /*none_ok=*/1, &bias) ||
      !as_pointer(ARG(7), "stream", /*none_ok=*/1, &stream)) {
    return NULL;
  }
  if (!PyLong_Check(ARG(5))) {
    PyErr_Format(PyExc_TypeError, "normjit._launch.launch: batch must be an int, not %R",
                 (PyObject*)Py_TYPE(ARG(5)));
    return NULL;
  }
  const long long batch = PyLong_AsLongLong(ARG(5));
  if (batch == -1 && PyErr_Occurred()) return NULL;
  if (!PyFloat_Check(ARG(6)) && !PyLong_Check(ARG(6))) {
    PyErr_Format(PyExc_TypeError, "normjit._launch.launch: eps must be a float, not %R",
                 (PyObject*)Py_TYPE(ARG(6)));
    return NULL;
  }
  const double eps = PyFloat_AsDouble(ARG(6));
  if (eps == -1.0 && PyErr_Occurred()) return NULL;
#undef ARG
  if (!bound) {
    PyErr_SetString(PyExc_RuntimeError, "normjit._launch.launch: bind() was not called");
    return NULL;
  }
  normjit_status status;
  /* As ctypes does: other Python threads run while the launch is enqueued. */
  PyThreadState* thread = PyEval_SaveThread(); /* Py_BEGIN_ALLOW_THREADS, spelled out */
  status = bound((const normjit_kernel*)kernel, x, y, weight, bias, (int64_t)batch, eps,
                 (struct CUstream_st*)stream);
  PyEval_RestoreThread(thread);
  return PyLong_FromLong((long)status);
}

/* An int64 argument (batch, a row count or stride) of the function fn. */
static int as_int64(PyObject* arg, const char* fn, const char* name, long long* out) {
  if (!PyLong_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "normjit._launch.%s: %s must be an int, not %R", fn, name,
                 (PyObject*)Py_TYPE(arg));
    return 0;
  }
  *out = PyLong_AsLongLong(arg);
  return !(*out == -1 && PyErr_Occurred());
}

/* launch_ex(kernel, x, y, weight, bias, batch, eps, residual, residual_out, scale, mean, rstd,
 * stream, rows): normjit_launch_ex with the fields of normjit_launch_args; rows is None
 * (every tensor's rows contiguous) or (inner_rows, x_strides[0], x_strides[1], y_strides[0],
 * y_strides[1], residual_strides[0], residual_strides[1], residual_out_strides[0],
 * residual_out_strides[1]). */
static PyObject* launch_ex(PyObject* self, PyObject* argt) {
  /* The pointer arguments: index in the argument tuple, name, whether None (NULL) is taken. */
  static const struct {
    int index;
    const char* name;
    int none_ok;
  } pointers[] = {
      {0, "kernel", 0},       {1, "x", 0},       {2, "y", 0},
      {3, "weight", 1},       {4, "bias", 1},    {7, "residual", 1},
      {8, "residual_out", 1}, {9, "scale", 1},   {10, "mean", 1},
      {11, "rstd", 1},        {12, "stream", 1},
  };
  (void)self;
  const Py_ssize_t nargs = PyTuple_Size(argt);
  if (nargs != 14) {
    PyErr_Format(PyExc_TypeError,
                 "normjit._launch.launch_ex takes 14 arguments (kernel, x, y, weight, bias, "
                 "batch, eps, residual, residual_out, scale, mean, rstd, stream, rows), not %zd",
                 nargs);
    return NULL;
  }
  void* p[13] = {NULL};
  for (size_t i = 0; i < sizeof(pointers) / sizeof(pointers[0]); ++i) {
    const int at = pointers[i].index;
    if (!as_pointer(PyTuple_GetItem(argt, at), pointers[i].name, pointers[i].none_ok, &p[at])) {
      return NULL;
    }
  }
  normjit_launch_args args = defaults;
  long long batch;
  if (!as_int64(PyTuple_GetItem(argt, 5), "launch_ex", "batch", &batch)) return NULL;
  PyObject* eps = PyTuple_GetItem(argt, 6);
  if (!PyFloat_Check(eps) && !PyLong_Check(eps)) {
    PyErr_Format(PyExc_TypeError, "normjit._launch.launch_ex: eps must be a float, not %R",
                 (PyObject*)Py_TYPE(eps));
    return NULL;
  }
  args.eps = PyFloat_AsDouble(eps);
  if (args.eps == -1.0 && PyErr_Occurred()) return NULL;
  PyObject* rows = PyTuple_GetItem(argt, 13);
  if (rows != Py_None) {
    if (!PyTuple_Check(rows) || PyTuple_Size(rows) != 9) {
      PyErr_Format(PyExc_TypeError,
                   "normjit._launch.launch_ex: rows must be None or a tuple of 9 ints "
                   "(inner_rows and the [outer, inner] strides of x, y, residual, "
                   "residual_out), not %R",
                   rows);
      return NULL;
    }
    long long v[9];
    for (int i = 0; i < 9; ++i) {
      if (!as_int64(PyTuple_GetItem(rows, i), "launch_ex", "a value of rows", &v[i])) return NULL;
    }
    args.inner_rows = v[0];
    int64_t* strides[] = {args.x_strides, args.y_strides, args.residual_strides,
                          args.residual_out_strides};
    for (int t = 0; t < 4; ++t) {
      strides[t][0] = v[1 + 2 * t];
      strides[t][1] = v[2 + 2 * t];
    }
  }
  if (!bound_ex) {
    PyErr_SetString(PyExc_RuntimeError, "normjit._launch.launch_ex: bind_ex() was not called");
    return NULL;
  }
  args.x = p[1];
  args.y = p[2];
  args.weight = p[3];
  args.bias = p[4];
  args.batch = (int64_t)batch;
  args.residual = p[7];
  args.residual_out = p[8];
  args.scale = (const float*)p[9];
  args.mean = (float*)p[10];
  args.rstd = (float*)p[11];
  normjit_status status;
  PyThreadState* thread = PyEval_SaveThread();
  status = bound_ex((const normjit_kernel*)p[0], &args, (struct CUstream_st*)p[12]);
  PyEval_RestoreThread(thread);
  return PyLong_FromLong((long)status);
}

/* launch_backward(kernel, x, dy, mean, rstd, weight, dx, dweight, dbias, batch, stream
 * [, dresidual_out[, bias]]): normjit_launch_backward with the fields of
 * normjit_backward_args. */
static PyObject* launch_backward(PyObject* self, PyObject* argt) {
  /* The pointer arguments in the argument tuple's order (batch is index 9), and whether None
   * (NULL) is taken; the library checks which ones the kernel's spec needs. */
  static const struct {
    const char* name;
    int none_ok;
  } pointers[] = {
      {"kernel", 0}, {"x", 0},  {"dy", 0},      {"mean", 1},  {"rstd", 0},
      {"weight", 1}, {"dx", 0}, {"dweight", 1}, {"dbias", 1},
  };
  (void)self;
  const Py_ssize_t nargs = PyTuple_Size(argt);
  if (nargs < 11 || nargs > 13) {
    PyErr_Format(PyExc_TypeError,
                 "normjit._launch.launch_backward takes 11 to 13 arguments (kernel, x, dy, mean, "
                 "rstd, weight, dx, dweight, dbias, batch, stream[, dresidual_out[, bias]]), "
                 "not %zd",
                 nargs);
    return NULL;
  }
  void* p[9] = {NULL};
  for (int i = 0; i < 9; ++i) {
    if (!as_pointer(PyTuple_GetItem(argt, i), pointers[i].name, pointers[i].none_ok, &p[i])) {
      return NULL;
    }
  }
  long long batch;
  if (!as_int64(PyTuple_GetItem(argt, 9), "launch_backward", "batch", &batch)) return NULL;
  void* stream;
  if (!as_pointer(PyTuple_GetItem(argt, 10), "stream", /*none_ok=*/1, &stream)) return NULL;
  void* dresidual_out = NULL;
  if (nargs >= 12 &&
      !as_pointer(PyTuple_GetItem(argt, 11), "dresidual_out", /*none_ok=*/1, &dresidual_out)) {
    return NULL;
  }
  void* bias = NULL;
  if (nargs == 13 && !as_pointer(PyTuple_GetItem(argt, 12), "bias", /*none_ok=*/1, &bias)) {
    return NULL;
  }
  if (!bound_backward) {
    PyErr_SetString(PyExc_RuntimeError,
                    "normjit._launch.launch_backward: bind_backward() was not called");
    return NULL;
  }
  normjit_backward_args args = backward_defaults;
  args.x = p[1];
  args.dy = p[2];
  args.mean = (const float*)p[3];
  args.rstd = (const float*)p[4];
  args.weight = p[5];
  args.dx = p[6];
  args.dweight = p[7];
  args.dbias = p[8];
  args.batch = (int64_t)batch;
  args.dresidual_out = dresidual_out;
  args.bias = bias;
  normjit_status status;
  PyThreadState* thread = PyEval_SaveThread();
  status = bound_backward((const normjit_kernel*)p[0], &args, (struct CUstream_st*)stream);
  PyEval_RestoreThread(thread);
  return PyLong_FromLong((long)status);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O,
     "bind(address): calls go to the normjit_launch at this address (normjit._capi's)."},
    {"launch", launch, METH_VARARGS,
     "launch(kernel, x, y, weight, bias, batch, eps, stream) -> status: normjit_launch.\n"
     "Pointers and handles are ints (weight, bias and stream may be None); the status is "
     "normjit_status as an int, 0 for NORMJIT_OK."},
    {"bind_ex", bind_ex, METH_VARARGS,
     "bind_ex(launch_ex_address, args_init_sized_address): launch_ex calls go to the\n"
     "normjit_launch_ex at the first address, with the defaults that the\n"
     "normjit_launch_args_init_sized at the second (normjit._capi's) fills in."},
    {"launch_ex", launch_ex, METH_VARARGS,
     "launch_ex(kernel, x, y, weight, bias, batch, eps, residual, residual_out, scale, mean,\n"
     "rstd, stream, rows) -> status: normjit_launch_ex. Pointers as for launch (x and y ints,\n"
     "the others int or None); rows None (contiguous) or (inner_rows, x_strides[0],\n"
     "x_strides[1], y_strides[0], y_strides[1], residual_strides[0], residual_strides[1],\n"
     "residual_out_strides[0], residual_out_strides[1])."},
    {"bind_backward", bind_backward, METH_VARARGS,
     "bind_backward(launch_backward_address, backward_args_init_sized_address):\n"
     "launch_backward calls go to the normjit_launch_backward at the first address, with the\n"
     "defaults that the normjit_backward_args_init_sized at the second fills in."},
    {"launch_backward", launch_backward, METH_VARARGS,
     "launch_backward(kernel, x, dy, mean, rstd, weight, dx, dweight, dbias, batch, stream)\n"
     "-> status: normjit_launch_backward. kernel, x, dy, rstd and dx are ints; mean, weight,\n"
     "dweight, dbias and stream int or None; batch an int."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "normjit._launch",
    "normjit_launch, normjit_launch_ex and normjit_launch_backward without ctypes' argument "
    "conversion (see normjit._capi.launch_function, launch_ex_function and "
    "launch_backward_function).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__launch(void) { return PyModule_Create(&module); }
