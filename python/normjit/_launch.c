/* normjit._launch: normjit_launch called from Python without ctypes' per-call argument
 * conversion (about 2 us of an eager normjit.torch call on the H100 machine's host).
 *
 * Built against the stable ABI (one wheel serves every CPython from the floor in
 * pyproject.toml's wheel.py-api up). It does not link libnormjit.so: the library's SONAME is
 * libnormjit.so.0 and the wheel holds it as libnormjit.so, and the library to call is the one
 * normjit._capi loaded (NORMJIT_LIBRARY may name another). _capi hands over the address of
 * that library's normjit_launch with bind(); calls go through a pointer of the header's own
 * prototype, so the compiler checks them against normjit.h. Errors stay Python's: launch
 * returns the status and normjit._capi builds the exception from it. */
#include <normjit/normjit.h>
#include <stdint.h>

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef __typeof__(normjit_launch) launch_fn;

static launch_fn* bound; /* the normjit_launch of the library normjit._capi loaded */

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

static PyMethodDef methods[] = {
    {"bind", bind, METH_O,
     "bind(address): calls go to the normjit_launch at this address (normjit._capi's)."},
    {"launch", launch, METH_VARARGS,
     "launch(kernel, x, y, weight, bias, batch, eps, stream) -> status: normjit_launch.\n"
     "Pointers and handles are ints (weight, bias and stream may be None); the status is "
     "normjit_status as an int, 0 for NORMJIT_OK."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "normjit._launch",
    "normjit_launch without ctypes' argument conversion (see normjit._capi.launch_function).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__launch(void) { return PyModule_Create(&module); }
